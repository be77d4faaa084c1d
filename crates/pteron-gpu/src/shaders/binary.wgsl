// out[i] = op(a[ia], b[ib]) over a broadcast index space.
// p: n, op, alpha, rank, a_off, b_off, out_off, shape[rank], a_strides[rank], b_strides[rank]
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let op = p[1];
    let alpha = pf(2u);
    let r = p[3];
    var ia = p[4];
    var ib = p[5];
    var rem = i;
    for (var k = 0u; k < r; k++) {
        let d = r - 1u - k;
        let s = p[7u + d];
        let idx = rem % s;
        rem = rem / s;
        ia += idx * p[7u + r + d];
        ib += idx * p[7u + 2u * r + d];
    }
    let a = ld(ia);
    let b = ld(ib);
    var y: f32;
    switch op {
        case 0u: { y = a + alpha * b; }
        case 1u: { y = a - alpha * b; }
        case 2u: { y = a * b; }
        case 3u: { y = a / b; }
        // maximum / minimum propagate NaN (the comparison alone would not)
        case 4u: { y = select(max(a, b), nan(), is_nan(a) || is_nan(b)); }
        case 5u: { y = select(min(a, b), nan(), is_nan(a) || is_nan(b)); }
        default: { y = nan(); }
    }
    st(p[6] + i, y);
}
