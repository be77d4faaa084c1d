//! Speech helpers (feature `audio`): WAV decoding to 16 kHz mono and Silero VAD segments, for
//! hosts without their own audio stack (the JavaScript package's VAD demo).

use std::sync::Arc;

use pteron::MethodOptions;
use pteron_audio::{parse_wav, resample, segments_from_probs, SegmentParams, Vad};

use crate::error::{fail, from_pteron, guard};
use crate::{handle, put, PteronProgram, PteronStatus};

/// The rate the VAD and Whisper take.
const RATE: u32 = 16_000;

/// Decodes a WAV file held in memory (PCM 8/16/24/32-bit or 32/64-bit float, any rate, any
/// number of channels, mixed down) and resamples it to 16 kHz mono. `*out` receives a buffer
/// of `*len` floats, to be freed with `pteron_buffer_free(*out, *len * 4)`; an empty clip gives
/// NULL and 0.
///
/// # Safety
/// `data` valid for `len` bytes; `out` and `len_out` valid for writes.
#[no_mangle]
pub unsafe extern "C" fn pteron_wav_to_16k(
    data: *const u8,
    len: usize,
    out: *mut *mut f32,
    len_out: *mut usize,
) -> PteronStatus {
    guard(|| {
        if data.is_null() {
            return Err(fail(PteronStatus::InvalidArgument, "data is NULL"));
        }
        // Safety: the caller's contract.
        let bytes = unsafe { std::slice::from_raw_parts(data, len) };
        let audio =
            parse_wav(bytes).map_err(|e| fail(PteronStatus::InvalidArgument, e.to_string()))?;
        let samples = if audio.sample_rate == RATE {
            audio.samples
        } else {
            resample(&audio.samples, audio.sample_rate, RATE)
                .map_err(|e| fail(PteronStatus::InvalidArgument, e.to_string()))?
        };
        let n = samples.len();
        let bytes = n
            .checked_mul(4)
            .ok_or_else(|| fail(PteronStatus::ResourceLimit, "clip too long"))?;
        let buf = crate::buffer::pteron_buffer_new(bytes) as *mut f32;
        if n > 0 && buf.is_null() {
            return Err(fail(PteronStatus::ResourceLimit, "out of memory"));
        }
        if n > 0 {
            // Safety: `buf` holds `n` floats (allocated just above, 64-byte aligned).
            unsafe { std::ptr::copy_nonoverlapping(samples.as_ptr(), buf, n) };
        }
        // Safety: the caller's contract.
        unsafe {
            put(out, buf, "out")?;
            put(len_out, n, "len_out")
        }
    })
}

/// Speech in 16 kHz mono `samples` by Silero VAD (`program`: silero-vad's ExecuTorch export),
/// with silero-vad's default segment rules. Writes up to `capacity` segments as
/// `[start, end)` sample pairs into `out` (2·capacity values) and the number found into `*n`,
/// which may exceed `capacity` (call again with more room).
///
/// # Safety
/// `program` is a live program; `samples` valid for `len` floats; `out` valid for
/// 2·`capacity` values (may be NULL when `capacity` is 0); `n` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn pteron_vad_segments(
    program: *const PteronProgram,
    samples: *const f32,
    len: usize,
    out: *mut u64,
    capacity: usize,
    n: *mut usize,
) -> PteronStatus {
    guard(|| {
        // Safety: the caller's contract.
        let program = unsafe { handle(program, "program")? };
        if samples.is_null() && len > 0 {
            return Err(fail(PteronStatus::InvalidArgument, "samples is NULL"));
        }
        if out.is_null() && capacity > 0 {
            return Err(fail(PteronStatus::InvalidArgument, "out is NULL"));
        }
        let samples: &[f32] = if len == 0 {
            &[]
        } else {
            // Safety: the caller's contract.
            unsafe { std::slice::from_raw_parts(samples, len) }
        };
        let loaded = Arc::clone(&program.inner);
        let mut vad =
            Vad::new(loaded.program(), MethodOptions::new().threads(1)).map_err(from_audio)?;
        let probs = vad.probabilities(samples).map_err(from_audio)?;
        let segs = segments_from_probs(&probs, samples.len(), &SegmentParams::default());
        for (i, s) in segs.iter().take(capacity).enumerate() {
            // Safety: i < capacity; `out` holds 2·capacity values.
            unsafe {
                out.add(2 * i).write(s.start as u64);
                out.add(2 * i + 1).write(s.end as u64);
            }
        }
        // Safety: the caller's contract.
        unsafe { put(n, segs.len(), "n") }
    })
}

/// The status for a speech runner error.
fn from_audio(e: pteron_audio::Error) -> PteronStatus {
    match e {
        pteron_audio::Error::Pteron(e) => from_pteron(e),
        e => fail(PteronStatus::InvalidProgram, e.to_string()),
    }
}
