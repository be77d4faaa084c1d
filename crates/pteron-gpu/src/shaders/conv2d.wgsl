// Direct 2-d convolution (groups, stride, padding, dilation), one output element an invocation.
// p: n_out, C, H, W, OC, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups,
//    x_off, w_off, b_off, has_bias, out_off
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let c = p[1];
    let h = p[2];
    let w = p[3];
    let oc_n = p[4];
    let oh_n = p[5];
    let ow_n = p[6];
    let kh_n = p[7];
    let kw_n = p[8];
    let ow = i % ow_n;
    let oh = (i / ow_n) % oh_n;
    let oc = (i / (ow_n * oh_n)) % oc_n;
    let n = i / (ow_n * oh_n * oc_n);
    let gin = c / p[15];
    let g = oc / (oc_n / p[15]);
    var acc = 0.0;
    if (p[19] != 0u) {
        acc = ld(p[18] + oc);
    }
    for (var ic = 0u; ic < gin; ic++) {
        let x_plane = p[16] + ((n * c + g * gin + ic) * h) * w;
        let w_plane = p[17] + (oc * gin + ic) * kh_n * kw_n;
        for (var ky = 0u; ky < kh_n; ky++) {
            let iy = i32(oh * p[9] + ky * p[13]) - i32(p[11]);
            if (iy < 0 || iy >= i32(h)) {
                continue;
            }
            for (var kx = 0u; kx < kw_n; kx++) {
                let ix = i32(ow * p[10] + kx * p[14]) - i32(p[12]);
                if (ix < 0 || ix >= i32(w)) {
                    continue;
                }
                acc = fma(ld(x_plane + u32(iy) * w + u32(ix)), ld(w_plane + ky * kw_n + kx), acc);
            }
        }
    }
    st(p[20] + i, acc);
}
