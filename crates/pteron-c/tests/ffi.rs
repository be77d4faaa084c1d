//! The C API called as C would call it: statuses and error texts for bad arguments, bad files
//! and bad inputs, and a full load-run-read cycle on a committed fixture.

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::ptr;

// The C API, called through its Rust names (the same symbols libpteron_c exports).
use pteron_c::*;

const FLOAT: i32 = 6;
const LONG: i32 = 4;

/// The elements of a float32 `.npy` file (version 1 header) as bytes.
fn npy_bytes(path: PathBuf) -> Vec<u8> {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY");
    let header = u16::from_le_bytes([b[8], b[9]]) as usize;
    b[10 + header..].to_vec()
}

fn fixture(rel: &str) -> CString {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel);
    CString::new(p.to_str().unwrap()).unwrap()
}

fn last_error() -> String {
    // Safety: the library returns a valid NUL-terminated string.
    unsafe { CStr::from_ptr(pteron_last_error()) }
        .to_string_lossy()
        .into_owned()
}

fn runtime() -> *mut PteronRuntime {
    let mut rt = ptr::null_mut();
    // Safety: `rt` is a valid out-pointer.
    assert_eq!(unsafe { pteron_runtime_new(1, &mut rt) }, PteronStatus::Ok);
    rt
}

#[test]
fn null_arguments_are_errors() {
    // Safety: every pointer is NULL or valid; NULL is what is being tested.
    unsafe {
        assert_eq!(
            pteron_runtime_new(1, ptr::null_mut()),
            PteronStatus::InvalidArgument
        );
        let mut p = ptr::null_mut();
        let path = fixture("models/mlp/model.pte");
        assert_eq!(
            pteron_program_load_file(ptr::null(), path.as_ptr(), &mut p),
            PteronStatus::InvalidArgument
        );
        assert!(last_error().contains("runtime is NULL"), "{}", last_error());
        let rt = runtime();
        assert_eq!(
            pteron_program_load_file(rt, ptr::null(), &mut p),
            PteronStatus::InvalidArgument
        );
        assert_eq!(
            pteron_method_execute(ptr::null_mut()),
            PteronStatus::InvalidArgument
        );
        // Freeing NULL is a no-op.
        pteron_program_free(ptr::null_mut());
        pteron_method_free(ptr::null_mut());
        pteron_runtime_free(rt);
    }
}

#[test]
fn bad_files_and_names_give_their_status() {
    // Safety: valid pointers throughout.
    unsafe {
        let rt = runtime();
        let mut p = ptr::null_mut();
        let missing = CString::new("/nonexistent/model.pte").unwrap();
        assert_eq!(
            pteron_program_load_file(rt, missing.as_ptr(), &mut p),
            PteronStatus::Io
        );
        let bytes = std::fs::read(fixture("models/mlp/model.pte").to_str().unwrap()).unwrap();
        let half = &bytes[..bytes.len() / 2];
        assert_eq!(
            pteron_program_load_buffer(rt, half.as_ptr(), half.len(), &mut p),
            PteronStatus::InvalidProgram
        );
        assert!(!last_error().is_empty());
        assert_eq!(
            pteron_program_load_buffer(rt, bytes.as_ptr(), bytes.len(), &mut p),
            PteronStatus::Ok
        );
        let mut m = ptr::null_mut();
        let nope = CString::new("nope").unwrap();
        assert_eq!(
            pteron_method_load(p, nope.as_ptr(), 0, &mut m),
            PteronStatus::MethodNotFound
        );
        assert!(last_error().contains("nope"), "{}", last_error());
        let mut count = 0;
        assert_eq!(pteron_program_method_count(p, &mut count), PteronStatus::Ok);
        let mut name = ptr::null();
        assert_eq!(
            pteron_program_method_name(p, 0, &mut name),
            PteronStatus::Ok
        );
        assert_eq!(CStr::from_ptr(name).to_str().unwrap(), "forward");
        assert_eq!(
            pteron_program_method_name(p, count, &mut name),
            PteronStatus::InvalidArgument
        );
        pteron_program_free(p);
        pteron_runtime_free(rt);
    }
}

#[test]
fn runs_a_fixture_and_checks_inputs() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models/mlp");
    let input = npy_bytes(dir.join("input0.npy"));
    let expected = npy_bytes(dir.join("expected0.npy"));
    // Safety: valid pointers throughout; the views point into live buffers.
    unsafe {
        let rt = runtime();
        let mut p = ptr::null_mut();
        let path = fixture("models/mlp/model.pte");
        assert_eq!(
            pteron_program_load_file(rt, path.as_ptr(), &mut p),
            PteronStatus::Ok
        );
        let mut m = ptr::null_mut();
        let forward = CString::new("forward").unwrap();
        assert_eq!(
            pteron_method_load(p, forward.as_ptr(), 0, &mut m),
            PteronStatus::Ok
        );
        // The method keeps the program's bytes: free the program first.
        pteron_program_free(p);

        let mut spec = std::mem::zeroed::<PteronTensorView>();
        assert_eq!(pteron_method_input(m, 0, &mut spec), PteronStatus::Ok);
        assert_eq!(spec.dtype, FLOAT);
        assert_eq!(spec.nbytes, input.len());
        assert_eq!(
            pteron_method_input(m, 99, &mut spec),
            PteronStatus::InvalidArgument
        );

        // The declared output, before any execution: float32 [4, 10].
        let mut declared = std::mem::zeroed::<PteronTensorView>();
        assert_eq!(
            pteron_method_output_info(m, 0, &mut declared),
            PteronStatus::Ok
        );
        assert_eq!(declared.dtype, FLOAT);
        assert_eq!(&declared.sizes[..declared.rank as usize], &[4, 10]);
        assert_eq!(declared.nbytes, expected.len());
        assert!(declared.data.is_null());
        assert_eq!(
            pteron_method_output_info(m, 1, &mut declared),
            PteronStatus::InvalidArgument
        );

        let mut view = spec;
        view.data = input.as_ptr().cast();
        view.nbytes = input.len();
        // Wrong dtype, then too few bytes: typed errors, the method still usable.
        view.dtype = LONG;
        assert_eq!(pteron_method_set_input(m, 0, &view), PteronStatus::Input);
        view.dtype = 99;
        assert_eq!(
            pteron_method_set_input(m, 0, &view),
            PteronStatus::InvalidArgument
        );
        view.dtype = FLOAT;
        view.nbytes -= 4;
        assert_ne!(pteron_method_set_input(m, 0, &view), PteronStatus::Ok);
        view.nbytes += 4;
        assert_eq!(pteron_method_set_input(m, 0, &view), PteronStatus::Ok);
        assert_eq!(pteron_method_execute(m), PteronStatus::Ok);

        let mut out = std::mem::zeroed::<PteronTensorView>();
        assert_eq!(pteron_method_output(m, 0, &mut out), PteronStatus::Ok);
        let got = std::slice::from_raw_parts(out.data.cast::<u8>(), out.nbytes);
        let want = &expected;
        assert_eq!(got.len(), want.len());
        let max = got
            .chunks_exact(4)
            .zip(want.chunks_exact(4))
            .map(|(a, b)| {
                let a = f32::from_le_bytes(a.try_into().unwrap());
                let b = f32::from_le_bytes(b.try_into().unwrap());
                (a - b).abs()
            })
            .fold(0f32, f32::max);
        assert!(max < 1e-5, "max abs error {max}");
        assert_eq!(
            pteron_method_output(m, 7, &mut out),
            PteronStatus::InvalidArgument
        );
        pteron_method_free(m);
        pteron_runtime_free(rt);
    }
}

#[test]
fn a_borrowed_buffer_is_used_in_place_when_aligned() {
    #[repr(C, align(64))]
    #[derive(Clone, Copy)]
    struct Block([u8; 64]);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/models/mlp");
    let pte = std::fs::read(dir.join("model.pte")).unwrap();
    let input = npy_bytes(dir.join("input0.npy"));
    let expected = npy_bytes(dir.join("expected0.npy"));
    // An aligned copy, and the same bytes one byte off alignment.
    let mut blocks = vec![Block([0; 64]); pte.len().div_ceil(64) + 1];
    let base = blocks.as_mut_ptr().cast::<u8>();
    // Safety: the blocks are plain bytes with room for `pte.len()` of them.
    unsafe {
        std::ptr::copy_nonoverlapping(pte.as_ptr(), base, pte.len());
    }
    let mut shifted = vec![0u8; pte.len() + 64];
    let off = (64 - (shifted.as_ptr() as usize % 64)) % 64 + 1;
    shifted[off..off + pte.len()].copy_from_slice(&pte);
    // Safety: valid pointers throughout; the buffers outlive the program and method.
    unsafe {
        let rt = runtime();
        for (data, want_borrowed) in [(base.cast_const(), 1), (shifted[off..].as_ptr(), 0)] {
            let mut p = ptr::null_mut();
            let mut borrowed = -1;
            assert_eq!(
                pteron_program_load_buffer_borrowed(rt, data, pte.len(), &mut p, &mut borrowed),
                PteronStatus::Ok,
                "{}",
                last_error()
            );
            assert_eq!(borrowed, want_borrowed);
            let mut m = ptr::null_mut();
            let forward = CString::new("forward").unwrap();
            assert_eq!(
                pteron_method_load(p, forward.as_ptr(), 1, &mut m),
                PteronStatus::Ok
            );
            let mut view = std::mem::zeroed::<PteronTensorView>();
            assert_eq!(pteron_method_input(m, 0, &mut view), PteronStatus::Ok);
            view.data = input.as_ptr().cast();
            view.nbytes = input.len();
            assert_eq!(pteron_method_set_input(m, 0, &view), PteronStatus::Ok);
            assert_eq!(pteron_method_execute(m), PteronStatus::Ok);
            let mut out = std::mem::zeroed::<PteronTensorView>();
            assert_eq!(pteron_method_output(m, 0, &mut out), PteronStatus::Ok);
            let got = std::slice::from_raw_parts(out.data.cast::<u8>(), out.nbytes);
            for (a, b) in got.chunks_exact(4).zip(expected.chunks_exact(4)) {
                let a = f32::from_le_bytes(a.try_into().unwrap());
                let b = f32::from_le_bytes(b.try_into().unwrap());
                assert!((a - b).abs() < 1e-5);
            }
            pteron_method_free(m);
            pteron_program_free(p);
        }
        let mut p = ptr::null_mut();
        assert_eq!(
            pteron_program_load_buffer_borrowed(rt, ptr::null(), 0, &mut p, ptr::null_mut()),
            PteronStatus::InvalidArgument
        );
        pteron_runtime_free(rt);
    }
}

/// WAV decoding and Silero VAD through the C API give the segments ExecuTorch's
/// probabilities give (the goldens of pteron-audio's tests), and bad WAV bytes are an error.
#[test]
fn vad_segments_match_the_goldens() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/speech");
    let goldens: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("vad_goldens.json")).unwrap())
            .unwrap();
    let rt = runtime();
    let vad = std::fs::read(dir.join("silero_vad.pte")).unwrap();
    let mut program = ptr::null_mut();
    // Safety: valid buffer and out-pointer.
    let st = unsafe { pteron_program_load_buffer(rt, vad.as_ptr(), vad.len(), &mut program) };
    assert_eq!(st, PteronStatus::Ok, "{}", last_error());
    for (clip, want) in goldens["clips"].as_object().unwrap() {
        let wav = std::fs::read(dir.join(format!("{clip}.wav"))).unwrap();
        let (mut samples, mut len) = (ptr::null_mut(), 0usize);
        // Safety: valid buffer and out-pointers.
        let st = unsafe { pteron_wav_to_16k(wav.as_ptr(), wav.len(), &mut samples, &mut len) };
        assert_eq!(st, PteronStatus::Ok, "{clip}: {}", last_error());
        let (mut n, mut segs) = (0usize, [0u64; 64]);
        // Safety: `samples` holds `len` floats; `segs` 2·32 values.
        let st =
            unsafe { pteron_vad_segments(program, samples, len, segs.as_mut_ptr(), 32, &mut n) };
        assert_eq!(st, PteronStatus::Ok, "{clip}: {}", last_error());
        let want: Vec<u64> = want["segments"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| [p[0].as_u64().unwrap(), p[1].as_u64().unwrap()])
            .collect();
        assert_eq!(&segs[..2 * n], &want[..], "{clip}");
        // Counting only (no room) gives the same number.
        let mut m = 0usize;
        // Safety: no output with capacity 0.
        let st = unsafe { pteron_vad_segments(program, samples, len, ptr::null_mut(), 0, &mut m) };
        assert_eq!((st, m), (PteronStatus::Ok, n));
        // Safety: the buffer came from `pteron_wav_to_16k` with `len` floats.
        unsafe { pteron_buffer_free(samples as *mut u8, len * 4) };
    }
    // A 22.05 kHz clip is resampled: 16/22.05 of its samples.
    let wav = std::fs::read(dir.join("numbers_22k.wav")).unwrap();
    let (mut samples, mut len) = (ptr::null_mut(), 0usize);
    // Safety: as above.
    let st = unsafe { pteron_wav_to_16k(wav.as_ptr(), wav.len(), &mut samples, &mut len) };
    assert_eq!(st, PteronStatus::Ok, "{}", last_error());
    let frames = (wav.len() - 44) / 2;
    assert!(
        len.abs_diff(frames * 16_000 / 22_050) <= 2,
        "{len} vs {frames}"
    );
    // Safety: as above.
    unsafe { pteron_buffer_free(samples as *mut u8, len * 4) };
    // Not a WAV: an error with a reason.
    let junk = b"RIFF....WAVEjunk";
    // Safety: valid buffer and out-pointers.
    let st = unsafe { pteron_wav_to_16k(junk.as_ptr(), junk.len(), &mut samples, &mut len) };
    assert_eq!(st, PteronStatus::InvalidArgument);
    assert!(!last_error().is_empty());
    // Safety: live handles.
    unsafe {
        pteron_program_free(program);
        pteron_runtime_free(rt);
    }
}
