//! Mutations of `.pte` programs, shared by `malformed/`, `regressions.rs` and the cargo-fuzz
//! targets in `fuzz/` (which include this file by path): a deterministic PRNG, byte-level
//! mutations, and structure-aware ones that edit fields of a program unpacked with the
//! flatbuffers object API (`program_object_api.rs`, declared as `crate::objapi` by every user)
//! and pack it again.
//!
//! Everything here must itself be panic-free on any input: the fuzzers' custom mutator runs it
//! on whatever bytes libFuzzer hands over.

#![allow(dead_code)]

use crate::objapi::executorch_flatbuffer as fbo;
use pteron::Tensor;
use pteron_format::ExtendedHeader;

// ------------------------------------------------------------------------------------------
// Containers

/// Bytes of flatbuffer at the start of `b` (`program_size` of its "eh00" header, or all of it).
pub fn checked_program_size(b: &[u8]) -> Option<usize> {
    match ExtendedHeader::parse(b).ok()? {
        Some(h) => usize::try_from(h.program_size)
            .ok()
            .filter(|&n| n >= 8 && n <= b.len()),
        None => Some(b.len()),
    }
}

/// The segment data of a file (empty when it has none); `None` when the header's range does
/// not fit the file.
pub fn checked_segment_data(b: &[u8]) -> Option<&[u8]> {
    match ExtendedHeader::parse(b).ok()? {
        Some(h) if h.segment_base_offset > 0 => {
            let base = usize::try_from(h.segment_base_offset).ok()?;
            let end = if h.segment_data_size > 0 {
                base.checked_add(usize::try_from(h.segment_data_size).ok()?)?
            } else {
                b.len()
            };
            b.get(base..end)
        }
        _ => Some(&[]),
    }
}

/// Unpacks a `.pte` into the object API (after the flatbuffers verifier accepts it), with its
/// segment data.
pub fn try_unpack(b: &[u8]) -> Option<(fbo::ProgramT, &[u8])> {
    let n = checked_program_size(b)?;
    let segments = checked_segment_data(b)?;
    let opts = flatbuffers::VerifierOptions {
        max_tables: 200_000,
        max_apparent_size: 1 << 28,
        ..Default::default()
    };
    let p = fbo::root_as_program_with_opts(&opts, &b[..n]).ok()?;
    Some((p.unpack(), segments))
}

/// Serialises `p` as a `.pte`: flatbuffer with a 32-byte "eh00" header spliced in after the
/// identifier, then `segments` at the next 128-byte boundary.
pub fn pack(p: &fbo::ProgramT, segments: &[u8]) -> Vec<u8> {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let root = p.pack(&mut b);
    b.finish(root, Some("ET12"));
    let fbuf = b.finished_data();
    let root = u32::from_le_bytes(fbuf[0..4].try_into().unwrap()) + 32;
    let program_size = fbuf.len() as u64 + 32;
    let base = if segments.is_empty() {
        0
    } else {
        program_size.div_ceil(128) * 128
    };
    let mut out = Vec::new();
    out.extend_from_slice(&root.to_le_bytes());
    out.extend_from_slice(&fbuf[4..8]);
    out.extend_from_slice(b"eh00");
    out.extend_from_slice(&32u32.to_le_bytes());
    out.extend_from_slice(&program_size.to_le_bytes());
    out.extend_from_slice(&base.to_le_bytes());
    out.extend_from_slice(&(segments.len() as u64).to_le_bytes());
    out.extend_from_slice(&fbuf[8..]);
    if !segments.is_empty() {
        out.resize(base as usize, 0);
        out.extend_from_slice(segments);
    }
    out
}

// ------------------------------------------------------------------------------------------
// Building blocks of programs

pub fn instr(a: fbo::InstructionArgumentsT) -> fbo::InstructionT {
    fbo::InstructionT { instr_args: a }
}

pub fn jump(cond: i32, dest: i32) -> fbo::InstructionT {
    instr(fbo::InstructionArgumentsT::JumpFalseCall(Box::new(
        fbo::JumpFalseCallT {
            cond_value_index: cond,
            destination_instruction: dest,
        },
    )))
}

pub fn move_call(from: i32, to: i32) -> fbo::InstructionT {
    instr(fbo::InstructionArgumentsT::MoveCall(Box::new(
        fbo::MoveCallT {
            move_from: from,
            move_to: to,
        },
    )))
}

pub fn free_call(v: i32) -> fbo::InstructionT {
    instr(fbo::InstructionArgumentsT::FreeCall(Box::new(
        fbo::FreeCallT { value_index: v },
    )))
}

pub fn bool_value(b: bool) -> fbo::KernelTypesT {
    fbo::KernelTypesT::Bool(Box::new(fbo::BoolT { bool_val: b }))
}

/// An unplanned bool tensor of 4 elements.
pub fn bool_tensor() -> fbo::KernelTypesT {
    fbo::KernelTypesT::Tensor(Box::new(fbo::TensorT {
        scalar_type: fbo::ScalarType::BOOL,
        sizes: Some(vec![4]),
        dim_order: Some(vec![0]),
        ..Default::default()
    }))
}

pub fn int_value(v: i64) -> fbo::KernelTypesT {
    fbo::KernelTypesT::Int(Box::new(fbo::IntT { int_val: v }))
}

// ------------------------------------------------------------------------------------------
// Random mutants

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

pub const INTERESTING_U32: &[u32] = &[
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    16,
    17,
    64,
    100,
    127,
    128,
    255,
    256,
    1000,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFE,
    0xFFFF_FFFF,
];

/// Applies 1–4 random mutations; positions mostly fall inside the flatbuffer (`hot` bytes).
pub fn mutate(orig: &[u8], hot: usize, rng: &mut Rng) -> Vec<u8> {
    let mut b = orig.to_vec();
    let rounds = 1 + rng.below(4);
    for _ in 0..rounds {
        if b.is_empty() {
            break;
        }
        let limit = if rng.below(10) < 9 {
            hot.min(b.len())
        } else {
            b.len()
        };
        let pos = rng.below(limit);
        match rng.below(20) {
            0..=4 => b[pos] ^= 1 << rng.below(8),
            5..=7 => b[pos] = [0x00, 0xFF, 0x7F, 0x80][rng.below(4)],
            8..=11 => {
                let p = pos & !3;
                if p + 4 <= b.len() {
                    let v = match rng.below(4) {
                        0 => b.len() as u32 + rng.below(3) as u32,
                        _ => INTERESTING_U32[rng.below(INTERESTING_U32.len())],
                    };
                    b[p..p + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            12..=14 => {
                // Small change of an aligned word: nudges offsets, indices and sizes.
                let p = pos & !3;
                if p + 4 <= b.len() {
                    let v = u32::from_le_bytes(b[p..p + 4].try_into().unwrap());
                    let d = [1u32, 2, 4, 8, 16][rng.below(5)];
                    let v = if rng.below(2) == 0 {
                        v.wrapping_add(d)
                    } else {
                        v.wrapping_sub(d)
                    };
                    b[p..p + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
            15 => {
                let p = pos & !7;
                if p + 8 <= b.len() {
                    let v = [u64::MAX, 1 << 63, 1 << 32, b.len() as u64, 0][rng.below(5)];
                    b[p..p + 8].copy_from_slice(&v.to_le_bytes());
                }
            }
            16 => b.truncate(pos),
            17 | 18 => {
                // Copy a chunk over another place (duplicates tables, vtables, offsets).
                let n = 1 + rng.below(64);
                let src = rng.below(limit);
                let n = n.min(b.len() - src).min(b.len() - pos);
                let chunk = b[src..src + n].to_vec();
                b[pos..pos + n].copy_from_slice(&chunk);
            }
            _ => {
                // Insert a duplicated chunk (shifts everything after it).
                let n = 1 + rng.below(16);
                let src = rng.below(b.len());
                let n = n.min(b.len() - src);
                let chunk = b[src..src + n].to_vec();
                b.splice(pos..pos, chunk);
            }
        }
    }
    b
}

/// Picks a value index: mostly a valid one, sometimes just out of range.
pub fn pick_index(rng: &mut Rng, n: usize) -> i32 {
    match rng.below(12) {
        0 => -1,
        1 => n as i32,
        2 => [i32::MAX, i32::MIN, n as i32 + 1][rng.below(3)],
        _ => rng.below(n) as i32,
    }
}

pub fn pick_i64(rng: &mut Rng, v: i64) -> i64 {
    let choices = [
        -1,
        0,
        1,
        2,
        3,
        -2,
        7,
        64,
        1 << 31,
        -(1 << 31),
        1 << 40,
        i64::MAX,
        i64::MIN,
        v.wrapping_add(1),
        v.wrapping_sub(1),
        v.wrapping_neg(),
        v.wrapping_mul(2),
    ];
    choices[rng.below(choices.len())]
}

pub fn pick_i32(rng: &mut Rng, v: i32) -> i32 {
    let choices = [
        -1,
        0,
        1,
        2,
        3,
        16,
        1 << 16,
        i32::MAX,
        i32::MIN,
        v.wrapping_add(1),
        v.wrapping_sub(1),
        v.wrapping_mul(2),
    ];
    choices[rng.below(choices.len())]
}

pub fn mutate_list<T: Clone>(items: &mut Vec<T>, rng: &mut Rng, new: impl FnOnce(&mut Rng) -> T) {
    match rng.below(5) {
        0 if !items.is_empty() => {
            let k = rng.below(items.len());
            items.remove(k);
        }
        1 if !items.is_empty() => {
            let k = rng.below(items.len());
            items.insert(k, items[k].clone());
        }
        2 if items.len() > 1 => {
            let (a, b) = (rng.below(items.len()), rng.below(items.len()));
            items.swap(a, b);
        }
        _ if !items.is_empty() => {
            let k = rng.below(items.len());
            items[k] = new(rng);
        }
        _ => items.push(new(rng)),
    }
}

pub fn mutate_tensor(t: &mut fbo::TensorT, rng: &mut Rng, n_arenas: usize) {
    match rng.below(9) {
        0 => {
            t.scalar_type =
                fbo::ScalarType([0, 1, 3, 4, 5, 6, 7, 11, 15, 27, 8, 30, -1][rng.below(13)])
        }
        1 | 2 => {
            let sizes = t.sizes.get_or_insert_with(Vec::new);
            if sizes.is_empty() || rng.below(4) == 0 {
                mutate_list(sizes, rng, |r| r.below(5) as i32);
            } else {
                let k = rng.below(sizes.len());
                sizes[k] = pick_i32(rng, sizes[k]);
            }
        }
        3 => {
            let d = t.dim_order.get_or_insert_with(Vec::new);
            mutate_list(d, rng, |r| r.below(5) as u8);
        }
        4 => {
            t.data_buffer_idx =
                [0, 1, 2, t.data_buffer_idx.wrapping_add(1), 1000, u32::MAX][rng.below(6)]
        }
        5 | 6 => match &mut t.allocation_info {
            Some(a) => match rng.below(4) {
                0 => a.memory_id = rng.below(n_arenas + 2) as u32,
                1 => {
                    a.memory_offset_low = [
                        0,
                        16,
                        a.memory_offset_low.wrapping_add(16),
                        a.memory_offset_low.wrapping_sub(16),
                        u32::MAX,
                    ][rng.below(5)]
                }
                2 => a.memory_offset_high = 1,
                _ => t.allocation_info = None,
            },
            None => {
                t.allocation_info = Some(Box::new(fbo::AllocationDetailsT {
                    memory_id: 1,
                    memory_offset_low: 16 * rng.below(64) as u32,
                    memory_offset_high: 0,
                }))
            }
        },
        7 => t.shape_dynamism = fbo::TensorShapeDynamism(rng.below(4) as i8),
        _ => t.storage_offset = 1,
    }
}

pub fn mutate_value(plan: &mut fbo::ExecutionPlanT, rng: &mut Rng) {
    let n_arenas = plan.non_const_buffer_sizes.as_ref().map_or(0, |s| s.len());
    let vals = plan.values.get_or_insert_with(Vec::new);
    let n = vals.len();
    if n == 0 {
        return;
    }
    let vi = rng.below(n);
    if rng.below(10) == 0 {
        // Replace the value by a copy of another one (any kind).
        let other = vals[rng.below(n)].clone();
        vals[vi] = other;
        return;
    }
    if rng.below(20) == 0 {
        vals[vi].val = [
            fbo::KernelTypesT::NONE,
            fbo::KernelTypesT::Null(Box::default()),
        ][rng.below(2)]
        .clone();
        return;
    }
    match &mut vals[vi].val {
        fbo::KernelTypesT::Tensor(t) => mutate_tensor(t, rng, n_arenas),
        fbo::KernelTypesT::Int(v) => v.int_val = pick_i64(rng, v.int_val),
        fbo::KernelTypesT::Double(v) => {
            v.double_val = [
                f64::NAN,
                f64::INFINITY,
                -f64::INFINITY,
                -0.0,
                1e300,
                -1.0,
                0.0,
            ][rng.below(7)]
        }
        fbo::KernelTypesT::Bool(v) => v.bool_val = !v.bool_val,
        fbo::KernelTypesT::IntList(l) => {
            if rng.below(2) == 0 {
                mutate_list(l.items.get_or_insert_with(Vec::new), rng, |r| {
                    pick_index(r, n) as i64
                })
            } else {
                l.items = None;
            }
        }
        fbo::KernelTypesT::DoubleList(l) => {
            mutate_list(l.items.get_or_insert_with(Vec::new), rng, |_| f64::NAN)
        }
        fbo::KernelTypesT::BoolList(l) => {
            mutate_list(l.items.get_or_insert_with(Vec::new), rng, |_| true)
        }
        fbo::KernelTypesT::TensorList(l) => {
            mutate_list(l.items.get_or_insert_with(Vec::new), rng, |r| {
                pick_index(r, vi.max(1))
            })
        }
        fbo::KernelTypesT::OptionalTensorList(l) => {
            mutate_list(l.items.get_or_insert_with(Vec::new), rng, |r| {
                pick_index(r, vi.max(1))
            })
        }
        fbo::KernelTypesT::String(s) => s.string_val = Some("\u{0}é".into()),
        _ => {}
    }
}

pub fn mutate_instructions(plan: &mut fbo::ExecutionPlanT, rng: &mut Rng) {
    let n = plan.values.as_ref().map_or(0, |v| v.len());
    let n_ops = plan.operators.as_ref().map_or(0, |o| o.len());
    let Some(chain) = plan.chains.as_mut().and_then(|c| c.first_mut()) else {
        return;
    };
    let ins = chain.instructions.get_or_insert_with(Vec::new);
    let len = ins.len();
    let k = rng.below(len.max(1));
    let new_instr = |rng: &mut Rng| match rng.below(3) {
        0 => move_call(pick_index(rng, n), pick_index(rng, n)),
        1 => jump(pick_index(rng, n), rng.below(len + 2) as i32),
        _ => free_call(pick_index(rng, n)),
    };
    match rng.below(8) {
        0 => {
            let i = new_instr(rng);
            ins.insert(k.min(len), i);
        }
        1 if len > 0 => {
            ins.remove(k);
        }
        2 if len > 1 => {
            let other = rng.below(len);
            ins.swap(k, other);
        }
        _ if len > 0 => match &mut ins[k].instr_args {
            fbo::InstructionArgumentsT::KernelCall(c) => {
                if rng.below(5) == 0 {
                    c.op_index = pick_index(rng, n_ops);
                } else {
                    mutate_list(c.args.get_or_insert_with(Vec::new), rng, |r| {
                        pick_index(r, n)
                    });
                }
            }
            fbo::InstructionArgumentsT::MoveCall(m) => m.move_to = pick_index(rng, n),
            fbo::InstructionArgumentsT::JumpFalseCall(j) => {
                j.destination_instruction = rng.below(len + 1) as i32
            }
            fbo::InstructionArgumentsT::FreeCall(f) => f.value_index = pick_index(rng, n),
            _ => {}
        },
        _ => {}
    }
}

/// Copies of `inputs` with some elements overwritten by boundary bit patterns.
pub fn hostile_inputs(inputs: &[Tensor], rng: &mut Rng) -> Vec<Tensor> {
    let mut out = inputs.to_vec();
    for t in out.iter_mut() {
        let size = t.dtype.elem_size();
        let n = t.data.len() / size.max(1);
        if n == 0 {
            continue;
        }
        for _ in 0..1 + rng.below(4) {
            let e = rng.below(n) * size;
            let pattern: u8 = [0xFF, 0x7F, 0x80, 0x00][rng.below(4)];
            for (j, b) in t.data[e..e + size].iter_mut().enumerate() {
                // 0x7F / 0x80 in the top byte: the largest / smallest value (NaN or ±inf for
                // floats with the rest set); 0xFF everywhere: -1 or NaN.
                *b = match pattern {
                    0x7F | 0x80 if j + 1 == size => pattern,
                    0x7F => 0xFF,
                    0x80 => 0x00,
                    p => p,
                };
            }
        }
    }
    out
}

/// Prints what a structure-aware mutant changed (`PTERON_DUMP_MUTANT=<#k>`).
pub fn dump_diff(a: &fbo::ProgramT, b: &fbo::ProgramT) {
    let (pa, pb) = (
        &a.execution_plan.as_ref().unwrap()[0],
        &b.execution_plan.as_ref().unwrap()[0],
    );
    let none = Vec::new();
    let (va, vb) = (
        pa.values.as_ref().unwrap_or(&none),
        pb.values.as_ref().unwrap_or(&none),
    );
    for i in 0..va.len().max(vb.len()) {
        if va.get(i) != vb.get(i) {
            eprintln!("value {i}: {:?}\n     -> {:?}", va.get(i), vb.get(i));
        }
    }
    let chain = |p: &fbo::ExecutionPlanT| {
        p.chains
            .as_ref()
            .and_then(|c| c.first())
            .and_then(|c| c.instructions.clone())
            .unwrap_or_default()
    };
    let (ia, ib) = (chain(pa), chain(pb));
    if ia != ib {
        for (k, i) in ib.iter().enumerate() {
            eprintln!("instr {k}: {:?}", i.instr_args);
        }
    }
    for (what, x, y) in [
        ("inputs", &pa.inputs, &pb.inputs),
        ("outputs", &pa.outputs, &pb.outputs),
    ] {
        if x != y {
            eprintln!("{what}: {x:?} -> {y:?}");
        }
    }
    if pa.operators != pb.operators {
        eprintln!("operators: {:?}", pb.operators);
    }
    if pa.non_const_buffer_sizes != pb.non_const_buffer_sizes {
        eprintln!("non_const_buffer_sizes: {:?}", pb.non_const_buffer_sizes);
    }
}

/// Changes 1–3 fields of a program, chosen at random.
pub fn semantic_mutate(p: &mut fbo::ProgramT, rng: &mut Rng) {
    semantic_mutate_with(p, rng, &[]);
}

/// [`semantic_mutate`], plus (for the fuzzers) edits that keep more mutants loadable: an
/// operator renamed to another of `op_names` (a kernel then gets arguments meant for another
/// operator), Int arguments set to small values (dims, sizes, flags), and tensor sizes set to
/// small ones.
pub fn semantic_mutate_with(p: &mut fbo::ProgramT, rng: &mut Rng, op_names: &[String]) {
    for _ in 0..1 + rng.below(3) {
        let Some(plan) = p.execution_plan.as_mut().and_then(|e| e.first_mut()) else {
            return;
        };
        if !op_names.is_empty() && rng.below(4) == 0 {
            match rng.below(3) {
                0 => {
                    if let Some(ops) = plan.operators.as_mut().filter(|o| !o.is_empty()) {
                        let k = rng.below(ops.len());
                        let full = &op_names[rng.below(op_names.len())];
                        let (name, overload) = full.split_once('.').unwrap_or((full, ""));
                        ops[k].name = Some(name.into());
                        ops[k].overload = Some(overload.into());
                    }
                }
                1 => {
                    let vals = plan.values.get_or_insert_with(Vec::new);
                    let ints: Vec<usize> = (0..vals.len())
                        .filter(|&i| matches!(vals[i].val, fbo::KernelTypesT::Int(_)))
                        .collect();
                    if !ints.is_empty() {
                        let i = ints[rng.below(ints.len())];
                        if let fbo::KernelTypesT::Int(v) = &mut vals[i].val {
                            v.int_val = rng.below(11) as i64 - 5;
                        }
                    }
                }
                _ => {
                    let vals = plan.values.get_or_insert_with(Vec::new);
                    if !vals.is_empty() {
                        let i = rng.below(vals.len());
                        if let fbo::KernelTypesT::Tensor(t) = &mut vals[i].val {
                            if let Some(s) = t.sizes.as_mut().filter(|s| !s.is_empty()) {
                                let k = rng.below(s.len());
                                s[k] = rng.below(5) as i32;
                            }
                        }
                    }
                }
            }
            continue;
        }
        match rng.below(20) {
            0..=9 => mutate_value(plan, rng),
            10..=15 => mutate_instructions(plan, rng),
            16 => {
                // Swap two operators: kernels get another op's arguments.
                if let Some(ops) = plan.operators.as_mut().filter(|o| o.len() > 1) {
                    let (a, b) = (rng.below(ops.len()), rng.below(ops.len()));
                    ops.swap(a, b);
                }
            }
            17 => {
                let n = plan.values.as_ref().map_or(0, |v| v.len());
                let io = if rng.below(2) == 0 {
                    &mut plan.inputs
                } else {
                    &mut plan.outputs
                };
                mutate_list(io.get_or_insert_with(Vec::new), rng, |r| pick_index(r, n));
            }
            18 => {
                if let Some(s) = plan.non_const_buffer_sizes.as_mut().filter(|s| s.len() > 1) {
                    s[1] = [
                        0,
                        1,
                        s[1] / 2,
                        s[1].wrapping_sub(16),
                        s[1].wrapping_mul(2),
                        -1,
                        i64::MAX,
                    ][rng.below(7)];
                }
            }
            _ => {
                if let Some(o) = p
                    .constant_segment
                    .as_mut()
                    .and_then(|c| c.offsets.as_mut())
                    .filter(|o| o.len() > 1)
                {
                    let k = 1 + rng.below(o.len() - 1);
                    o[k] =
                        [0, o[k].wrapping_add(16), o[k].wrapping_sub(16), u64::MAX][rng.below(4)];
                }
            }
        }
    }
}
