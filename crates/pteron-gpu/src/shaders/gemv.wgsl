// C[b] = alpha * A[b] @ B[b] + beta * bias for one row of A (decode steps: M = 1): one
// workgroup per output, its threads splitting the K products, then a tree sum.
// p: as matmul.wgsl (M = 1): M, N, K, a_off, b_off, c_off, bias_off, has_bias, alpha, beta,
//    a_sb, a_sm, a_sk, b_sb, b_sk, b_sn, bias_sm, bias_sn
@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let o = wid.x + wid.y * nwg.x;
    let nn = p[1];
    let bz = wid.z;
    if (o >= nn) {
        return;
    }
    let t = lid.x;
    let a_base = p[3] + bz * p[10];
    let b_base = p[4] + bz * p[13] + o * p[15];
    var acc = 0.0;
    for (var k = t; k < p[2]; k += 64u) {
        acc = fma(ld(a_base + k * p[12]), ld(b_base + k * p[14]), acc);
    }
    red[t] = acc;
    workgroupBarrier();
    reduce_sum(t);
    if (t == 0u) {
        var y = pf(8u) * red[0];
        if (p[7] != 0u) {
            y += pf(9u) * ld(p[6] + o * p[17]);
        }
        st(p[5] + bz * nn + o, y);
    }
}
