// Index-driven reads: embedding rows (op 0) and `gather` along a dim (op 1). An index outside
// its dim writes 0 there and sets the region's error word (word 0), which the host checks
// after the run: the portable kernels refuse such an index.
// op 0 p: n_out, 0, w_off, idx_off, out_off, rows, width
// op 1 p: n_out, 1, src_off, idx_off, out_off, rank, dim, out_shape[rank], src_strides[rank], src_dim_size
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    if (p[1] == 0u) {
        let width = p[6];
        let t = i / width;
        let idx = ldi(p[3] + t);
        if (idx < 0 || u32(idx) >= p[5]) {
            m[0] = 1u;
            m[p[4] + i] = 0u;
            return;
        }
        m[p[4] + i] = m[p[2] + u32(idx) * width + i % width];
        return;
    }
    let r = p[5];
    let dim = p[6];
    var src = p[2];
    var rem = i;
    for (var k = 0u; k < r; k++) {
        let d = r - 1u - k;
        let s = p[7u + d];
        var c = rem % s;
        rem = rem / s;
        if (d == dim) {
            let idx = ldi(p[3] + i);
            if (idx < 0 || u32(idx) >= p[7u + 2u * r]) {
                m[0] = 1u;
                m[p[4] + i] = 0u;
                return;
            }
            c = u32(idx);
        }
        src += c * p[7u + r + d];
    }
    m[p[4] + i] = m[src];
}
