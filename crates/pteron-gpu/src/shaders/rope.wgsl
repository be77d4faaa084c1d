// Rotary embedding of query and key rows, Llama's pairing: each (x[2i], x[2i+1]) of a head is
// rotated by the angle of position t and pair i (the tables hold cos and sin, [T, D/2]).
// p: pairs (T * H * D/2), H, D/2, x_off, out_off, cos_off, sin_off
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let half = p[2];
    let pair = i % half;
    let t = i / (half * p[1]);
    let a = ld(p[3] + 2u * i);
    let b = ld(p[3] + 2u * i + 1u);
    let c = ld(p[5] + t * half + pair);
    let s = ld(p[6] + t * half + pair);
    st(p[4] + 2u * i, a * c - b * s);
    st(p[4] + 2u * i + 1u, a * s + b * c);
}
