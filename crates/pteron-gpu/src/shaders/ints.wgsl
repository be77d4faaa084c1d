// Elementwise int32 / bool steps over a broadcast index space of up to three operands (bools
// are the words 0 and 1).
// p: n, op, s0, s1, rank, a_off, b_off, c_off, out_off, shape[rank], a_strides[rank],
//    b_strides[rank], c_strides[rank]
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let r = p[4];
    var ia = p[5];
    var ib = p[6];
    var ic = p[7];
    var rem = i;
    for (var k = 0u; k < r; k++) {
        let d = r - 1u - k;
        let s = p[9u + d];
        let idx = rem % s;
        rem = rem / s;
        ia += idx * p[9u + r + d];
        ib += idx * p[9u + 2u * r + d];
        ic += idx * p[9u + 3u * r + d];
    }
    let s0 = bitcast<i32>(p[2]);
    let s1 = bitcast<i32>(p[3]);
    var y: u32;
    switch p[1] {
        // a + alpha * b (wrapping, as int32 arithmetic does)
        case 0u: { y = bitcast<u32>(ldi(ia) + s0 * ldi(ib)); }
        case 1u: { y = select(0u, 1u, ldi(ia) >= s0); }
        case 2u: { y = m[ia] & m[ib]; }
        case 3u: { y = bitcast<u32>(f32(ldi(ia))); }
        case 4u: { y = select(0u, 1u, m[ia] != 0u); }
        // where(cond a, b, c)
        case 5u: { y = select(m[ic], m[ib], m[ia] != 0u); }
        case 6u: { y = bitcast<u32>(s0 + bitcast<i32>(i) * s1); }
        case 7u: { y = p[2]; }
        default: { y = 0u; }
    }
    m[p[8] + i] = y;
}
