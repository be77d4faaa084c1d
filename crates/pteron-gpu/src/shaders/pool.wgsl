// 2-d average pooling (fixed windows, or adaptive), one output element an invocation.
// p: n_out, H, W, OH, OW, KH, KW, sh, sw, ph, pw, count_include_pad, divisor, adaptive, x_off, out_off
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let h = i32(p[1]);
    let w = i32(p[2]);
    let oh_n = p[3];
    let ow_n = p[4];
    let ow = i32(i % ow_n);
    let oh = i32((i / ow_n) % oh_n);
    let plane = i / (ow_n * oh_n);
    var y0: i32;
    var y1: i32;
    var x0: i32;
    var x1: i32;
    var div: f32;
    if (p[13] != 0u) {
        y0 = (oh * h) / i32(oh_n);
        y1 = ((oh + 1) * h + i32(oh_n) - 1) / i32(oh_n);
        x0 = (ow * w) / i32(ow_n);
        x1 = ((ow + 1) * w + i32(ow_n) - 1) / i32(ow_n);
        div = f32((y1 - y0) * (x1 - x0));
    } else {
        y0 = oh * i32(p[7]) - i32(p[9]);
        x0 = ow * i32(p[8]) - i32(p[10]);
        y1 = min(y0 + i32(p[5]), h + i32(p[9]));
        x1 = min(x0 + i32(p[6]), w + i32(p[10]));
        let padded = f32((y1 - y0) * (x1 - x0));
        y0 = max(y0, 0);
        x0 = max(x0, 0);
        y1 = min(y1, h);
        x1 = min(x1, w);
        if (p[12] != 0u) {
            div = f32(p[12]);
        } else if (p[11] != 0u) {
            div = padded;
        } else {
            div = f32((y1 - y0) * (x1 - x0));
        }
    }
    var s = 0.0;
    let base = p[14] + plane * u32(h * w);
    for (var y = y0; y < y1; y++) {
        for (var x = x0; x < x1; x++) {
            s += ld(base + u32(y * w + x));
        }
    }
    st(p[15] + i, s / div);
}
