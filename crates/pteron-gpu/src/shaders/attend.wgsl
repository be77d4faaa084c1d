// Attention of T query rows over a key/value cache, one workgroup per (token, head) row:
// scores q·k_j × scale for keys j < limit (causal: the row's own position start + t and before),
// softmax, then the rows of V weighted by it. Grouped-query heads: head h reads cache head
// h / (H / KVH). The scores go through the region's scratch words (row stride: ctx).
// p: rows (T * H), H, KVH, D, start, keys (start + T), q_off, k_off, v_off, out_off,
//    scratch_off, ctx, scale, causal
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p[0]) {
        return;
    }
    let tid = lid.x;
    let heads = p[1];
    let kvh = p[2];
    let d = p[3];
    let h = row % heads;
    let t = row / heads;
    let g = h / (heads / kvh);
    var limit = p[5];
    if (p[13] != 0u) {
        limit = min(limit, p[4] + t + 1u);
    }
    let q = p[6] + row * d;
    let sc = p[10] + row * p[11];
    let scale = pf(12u);
    var mx = -inf();
    for (var j = tid; j < limit; j += 64u) {
        let k = p[7] + (j * kvh + g) * d;
        var s = 0.0;
        for (var e = 0u; e < d; e++) {
            s += ld(q + e) * ld(k + e);
        }
        s = s * scale;
        st(sc + j, s);
        mx = select(max(mx, s), nan(), is_nan(mx) || is_nan(s));
    }
    red[tid] = mx;
    workgroupBarrier();
    reduce_max(tid);
    mx = red[0];
    workgroupBarrier();
    var sum = 0.0;
    for (var j = tid; j < limit; j += 64u) {
        let e = exp(ld(sc + j) - mx);
        st(sc + j, e);
        sum += e;
    }
    red[tid] = sum;
    workgroupBarrier();
    reduce_sum(tid);
    sum = red[0];
    storageBarrier();
    let o = p[9] + row * d;
    for (var e = tid; e < d; e += 64u) {
        var acc = 0.0;
        for (var j = 0u; j < limit; j++) {
            acc += ld(sc + j) * ld(p[8] + (j * kvh + g) * d + e);
        }
        st(o + e, acc / sum);
    }
}
