// One workgroup per row: softmax / log-softmax along a dim, and layer normalization.
// softmax p: rows, dim, inner, x_off, out_off, log, kind=0
// layer norm p: rows, M, 0, x_off, out_off, eps, kind=1, w_off, has_w, b_off, has_b, mean_off, rstd_off
var<workgroup> red: array<f32, 64>;

fn reduce_max(t: u32) {
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) {
            let o = red[t + s];
            red[t] = select(max(red[t], o), nan(), is_nan(red[t]) || is_nan(o));
        }
        workgroupBarrier();
    }
}

fn reduce_sum(t: u32) {
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) {
            red[t] = red[t] + red[t + s];
        }
        workgroupBarrier();
    }
}

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
    } else {
        let x = p[3] + row * dim;
        let o = p[4] + row * dim;
        var s = 0.0;
        for (var j = t; j < dim; j += 64u) {
            s += ld(x + j);
        }
        red[t] = s;
        workgroupBarrier();
        reduce_sum(t);
        let mean = red[0] / f32(dim);
        workgroupBarrier();
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
        if (t == 0u) {
            st(p[11] + row, mean);
            st(p[12] + row, rstd);
        }
    }
}
