// One output element an invocation, reducing over a strided index space.
// p: n_out, op (0 sum, 1 mean, 2 amax, 3 amin), x_off, out_off, kr, rr, count,
//    keep_shape[kr], keep_strides[kr], red_shape[rr], red_strides[rr]
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let op = p[1];
    let kr = p[4];
    let rr = p[5];
    var base = p[2];
    var rem = i;
    for (var k = 0u; k < kr; k++) {
        let d = kr - 1u - k;
        let s = p[7u + d];
        base += (rem % s) * p[7u + kr + d];
        rem = rem / s;
    }
    let rs = 7u + 2u * kr;
    var acc = 0.0;
    if (op == 2u) {
        acc = -inf();
    } else if (op == 3u) {
        acc = inf();
    }
    let count = p[6];
    for (var j = 0u; j < count; j++) {
        var at = base;
        var r = j;
        for (var k = 0u; k < rr; k++) {
            let d = rr - 1u - k;
            let s = p[rs + d];
            at += (r % s) * p[rs + rr + d];
            r = r / s;
        }
        let v = ld(at);
        switch op {
            case 2u: { acc = select(max(acc, v), nan(), is_nan(acc) || is_nan(v)); }
            case 3u: { acc = select(min(acc, v), nan(), is_nan(acc) || is_nan(v)); }
            default: { acc += v; }
        }
    }
    if (op == 1u) {
        acc = acc / f32(count);
    }
    st(p[3] + i, acc);
}
