// Linear layer over 4-bit weights in groups along the input (ExecuTorch's Vulkan q4gsw
// packing: weights [N, K/2] bytes, input k in the low nibble of byte k/2 when k is even and in
// the high nibble when odd, each nibble the value + 8; scales [K/group, N]). With `dq` the
// input row is first quantized to int8 with its row's scale and zero point (dynamic
// activations: torchao's quantize_affine), and each group's integer sum is scaled.
// p: M, N, K, x_off, w_off (words), bytes per weight row, scales_off, group, out_off,
//    has_bias, bias_off, dq, x_scale_off, x_zp_off
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    let n_out = p[1];
    if (i >= p[0] * n_out) {
        return;
    }
    let row = i / n_out;
    let n = i % n_out;
    let k_all = p[2];
    let x = p[3] + row * k_all;
    let wrow = p[4] * 4u + n * p[5];
    let group = p[7];
    let dq = p[11] != 0u;
    var xs = 1.0;
    var inv = 1.0;
    var zp = 0;
    if (dq) {
        xs = ld(p[12] + row);
        inv = 1.0 / xs;
        zp = ldi(p[13] + row);
    }
    var acc = 0.0;
    for (var g0 = 0u; g0 < k_all; g0 += group) {
        let g1 = min(g0 + group, k_all);
        var si = 0;
        var sf = 0.0;
        for (var k = g0; k < g1; k++) {
            let b = wrow + k / 2u;
            let byte = (m[b / 4u] >> ((b % 4u) * 8u)) & 0xffu;
            let q = i32((byte >> ((k % 2u) * 4u)) & 15u) - 8;
            let v = ld(x + k);
            if (dq) {
                let xq = i32(clamp(round(v * inv) + f32(zp), -128.0, 127.0));
                si += (xq - zp) * q;
            } else {
                sf += v * f32(q);
            }
        }
        let ws = ld(p[6] + (g0 / group) * n_out + n);
        if (dq) {
            acc += f32(si) * xs * ws;
        } else {
            acc += sf * ws;
        }
    }
    if (p[9] != 0u) {
        acc += ld(p[10] + n);
    }
    st(p[8] + i, acc);
}
