// One workgroup per row: softmax / log-softmax along a dim, and layer normalization.
// softmax p: rows, dim, inner, x_off, out_off, log, kind=0
// layer norm p: rows, M, 0, x_off, out_off, eps, kind=1, w_off, has_w, b_off, has_b, mean_off, rstd_off
// RMS norm: the same words with kind=2: the mean taken as 0, no statistics written
// int8 parameters of each row (torchao's choose_qparams_affine, asymmetric, one block per row):
//   p: rows, M, 0, x_off, scale_off, zero_point_off, kind=3, quant_min (i32), quant_max (i32)
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p[0]) {
        return;
    }
    let t = lid.x;
    let dim = p[1];
    if (p[6] == 0u) {
        let inner = p[2];
        let base = (row / inner) * dim * inner + row % inner;
        let x = p[3] + base;
        let o = p[4] + base;
        var mx = -inf();
        for (var j = t; j < dim; j += 64u) {
            let v = ld(x + j * inner);
            mx = select(max(mx, v), nan(), is_nan(mx) || is_nan(v));
        }
        red[t] = mx;
        workgroupBarrier();
        reduce_max(t);
        mx = red[0];
        workgroupBarrier();
        var s = 0.0;
        for (var j = t; j < dim; j += 64u) {
            s += exp(ld(x + j * inner) - mx);
        }
        red[t] = s;
        workgroupBarrier();
        reduce_sum(t);
        s = red[0];
        let ls = log(s);
        for (var j = t; j < dim; j += 64u) {
            let d = ld(x + j * inner) - mx;
            st(o + j * inner, select(exp(d) / s, d - ls, p[5] != 0u));
        }
    } else if (p[6] == 3u) {
        let x = p[3] + row * dim;
        var lo = 0.0;
        var hi = 0.0;
        for (var j = t; j < dim; j += 64u) {
            let v = ld(x + j);
            lo = select(min(lo, v), nan(), is_nan(lo) || is_nan(v));
            hi = select(max(hi, v), nan(), is_nan(hi) || is_nan(v));
        }
        red[t] = lo;
        workgroupBarrier();
        reduce_min(t);
        lo = red[0];
        workgroupBarrier();
        red[t] = hi;
        workgroupBarrier();
        reduce_max(t);
        hi = red[0];
        if (t == 0u) {
            let qmin = f32(bitcast<i32>(p[7]));
            let qmax = f32(bitcast<i32>(p[8]));
            // the smallest normal float32 is the least scale
            let scale = max((hi - lo) / (qmax - qmin), bitcast<f32>(0x00800000u));
            let zp = clamp(qmin - round(lo / scale), qmin, qmax);
            st(p[4] + row, scale);
            m[p[5] + row] = bitcast<u32>(i32(zp));
        }
    } else {
        let x = p[3] + row * dim;
        let o = p[4] + row * dim;
        let centered = p[6] == 1u;
        var mean = 0.0;
        if (centered) {
            var s = 0.0;
            for (var j = t; j < dim; j += 64u) {
                s += ld(x + j);
            }
            red[t] = s;
            workgroupBarrier();
            reduce_sum(t);
            mean = red[0] / f32(dim);
            workgroupBarrier();
        }
        var q = 0.0;
        for (var j = t; j < dim; j += 64u) {
            let d = ld(x + j) - mean;
            q += d * d;
        }
        red[t] = q;
        workgroupBarrier();
        reduce_sum(t);
        let rstd = 1.0 / sqrt(red[0] / f32(dim) + pf(5u));
        for (var j = t; j < dim; j += 64u) {
            var y = (ld(x + j) - mean) * rstd;
            if (p[8] != 0u) {
                y = y * ld(p[7] + j);
            }
            if (p[10] != 0u) {
                y = y + ld(p[9] + j);
            }
            st(o + j, y);
        }
        if (t == 0u && centered) {
            st(p[11] + row, mean);
            st(p[12] + row, rstd);
        }
    }
}
