// Tree reductions over the 64 invocations of a workgroup (kernels with one workgroup per row
// or output): each invocation puts its partial value in red[t], then red[0] holds the result.
// NaN wins a min or max, as in the portable kernels.
var<workgroup> red: array<f32, 64>;

fn reduce_min(t: u32) {
    for (var s = 32u; s > 0u; s = s >> 1u) {
        if (t < s) {
            let o = red[t + s];
            red[t] = select(min(red[t], o), nan(), is_nan(red[t]) || is_nan(o));
        }
        workgroupBarrier();
    }
}

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
