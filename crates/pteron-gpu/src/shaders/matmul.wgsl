// Batched C[b] = alpha * A[b] @ B[b] + beta * bias, 16x16 tiles through workgroup memory.
// p: M, N, K, a_off, b_off, c_off, bias_off, has_bias, alpha, beta,
//    a_sb, a_sm, a_sk, b_sb, b_sk, b_sn, bias_sm, bias_sn
var<workgroup> ta: array<f32, 256>;
var<workgroup> tb: array<f32, 256>;

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let mm = p[0];
    let nn = p[1];
    let kk = p[2];
    let col = wid.x * 16u + lid.x;
    let row = wid.y * 16u + lid.y;
    let a_base = p[3] + wid.z * p[10];
    let b_base = p[4] + wid.z * p[13];
    var acc = 0.0;
    let tiles = (kk + 15u) / 16u;
    for (var t = 0u; t < tiles; t++) {
        let ka = t * 16u + lid.x;
        var va = 0.0;
        if (row < mm && ka < kk) {
            va = ld(a_base + row * p[11] + ka * p[12]);
        }
        ta[lid.y * 16u + lid.x] = va;
        let kb = t * 16u + lid.y;
        var vb = 0.0;
        if (kb < kk && col < nn) {
            vb = ld(b_base + kb * p[14] + col * p[15]);
        }
        tb[lid.y * 16u + lid.x] = vb;
        workgroupBarrier();
        for (var j = 0u; j < 16u; j++) {
            acc = fma(ta[lid.y * 16u + j], tb[j * 16u + lid.x], acc);
        }
        workgroupBarrier();
    }
    if (row < mm && col < nn) {
        var y = pf(8u) * acc;
        if (p[7] != 0u) {
            y += pf(9u) * ld(p[6] + row * p[16] + col * p[17]);
        }
        st(p[5] + (wid.z * mm + row) * nn + col, y);
    }
}
