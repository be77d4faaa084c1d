// out[dst(i)] = x[src(i)]: a strided gather/scatter over an index space (permutes, expands,
// slices, selects, concatenation pieces, contiguous copies).
// p: n, rank, src_off, dst_off, shape[rank], src_strides[rank], dst_strides[rank]
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let r = p[1];
    var src = p[2];
    var dst = p[3];
    var rem = i;
    for (var k = 0u; k < r; k++) {
        let d = r - 1u - k;
        let s = p[4u + d];
        let idx = rem % s;
        rem = rem / s;
        src += idx * p[4u + r + d];
        dst += idx * p[4u + 2u * r + d];
    }
    m[dst] = m[src]; // raw words: any dtype
}
