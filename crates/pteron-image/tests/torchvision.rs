#![cfg(feature = "decode")]
//! The resize against torchvision's (`Resize` of a uint8 tensor, bilinear, antialiased) on the
//! VLM fixture's pictures: testdata/llm/vlm/resize_goldens.json, made by
//! tools/export/export_vlm.py.

use std::path::PathBuf;

use pteron_image::Image;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/llm/vlm")
}

#[test]
fn resize_equals_torchvision() {
    let goldens: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir().join("resize_goldens.json")).unwrap()).unwrap();
    let mut checked = 0;
    for (name, g) in goldens.as_object().unwrap() {
        let img = Image::open(dir().join(g["png"].as_str().unwrap())).unwrap();
        assert_eq!(img.width() as u64, g["width"].as_u64().unwrap(), "{name}");
        assert_eq!(img.height() as u64, g["height"].as_u64().unwrap(), "{name}");
        for case in g["cases"].as_array().unwrap() {
            let (w, h) = (
                case["width"].as_u64().unwrap() as usize,
                case["height"].as_u64().unwrap() as usize,
            );
            let want = std::fs::read(dir().join(case["file"].as_str().unwrap())).unwrap();
            let got = img.resize(w, h).unwrap();
            let diff = got
                .planar()
                .iter()
                .zip(&want)
                .filter(|(a, b)| a != b)
                .count();
            assert_eq!(
                diff,
                0,
                "{name} to {w}x{h}: {diff} of {} bytes differ",
                want.len()
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 7);
}
