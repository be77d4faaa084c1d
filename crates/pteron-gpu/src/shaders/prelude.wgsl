// Shared by every kernel: the step's parameters (words at a dynamic offset) and the region's
// one buffer, which holds constants, inputs, intermediates and outputs at word offsets. The
// buffer is words: float32 values are read and written through their bits (`ld`, `st`), int32
// and bool values as they are, and copies move words whatever they hold.
@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read_write> m: array<u32>;

fn ld(i: u32) -> f32 {
    return bitcast<f32>(m[i]);
}

fn st(i: u32, v: f32) {
    m[i] = bitcast<u32>(v);
}

fn ldi(i: u32) -> i32 {
    return bitcast<i32>(m[i]);
}

fn pf(i: u32) -> f32 {
    return bitcast<f32>(p[i]);
}

// Invocation index of a 1-d range spread over a 2-d grid of 256-wide workgroups.
fn lin(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

fn nan() -> f32 {
    return bitcast<f32>(0x7fc00000u);
}

fn inf() -> f32 {
    return bitcast<f32>(0x7f800000u);
}

// On the bits: a compiler may take `x != x` to be false.
fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}
