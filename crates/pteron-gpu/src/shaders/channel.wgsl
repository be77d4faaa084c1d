// Inference batch norm: out = (x - mean[c]) * (1 / sqrt(var[c] + eps)) * w[c] + b[c].
// p: n, C, inner, x_off, out_off, mean_off, var_off, w_off, has_w, b_off, has_b, eps
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let c = (i / p[2]) % p[1];
    let invstd = 1.0 / sqrt(ld(p[6] + c) + pf(11u));
    var y = (ld(p[3] + i) - ld(p[5] + c)) * invstd;
    if (p[8] != 0u) {
        y = y * ld(p[7] + c);
    }
    if (p[10] != 0u) {
        y = y + ld(p[9] + c);
    }
    st(p[4] + i, y);
}
