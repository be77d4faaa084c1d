// Rotary embedding of query and key rows.
// Llama's pairing (mode 0): each (x[2i], x[2i+1]) of a head is rotated by the angle of
// position t and pair i; the tables hold cos and sin for these rows, [T, D/2]; one invocation
// per pair.
//   p: pairs (T * H * D/2), H, D/2, x_off, out_off, cos_off, sin_off, 0
// Hugging Face's halves (mode 1): the first R values of a head (R: the tables' width) are
// x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[R/2..R], x[0..R/2]); the rest pass
// through; the tables are [positions, R], read from row `start`; one invocation per value.
//   p: values (T * H * D), H, D, x_off, out_off, cos_off, sin_off, 1, R, start
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = lin(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    if (p[7] == 1u) {
        let d = p[2];
        let e = i % d;
        let r = p[8];
        var y = ld(p[3] + i);
        if (e < r) {
            let t = i / (d * p[1]);
            let row = (p[9] + t) * r;
            let half = r / 2u;
            let head = p[3] + i - e;
            var rot = 0.0;
            if (e < half) {
                rot = -ld(head + e + half);
            } else {
                rot = ld(head + e - half);
            }
            y = y * ld(p[5] + row + e) + rot * ld(p[6] + row + e);
        }
        st(p[4] + i, y);
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
