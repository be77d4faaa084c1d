//! `.ptd` container cases.

use super::*;
use crate::container::with_header;

#[test]
fn bad_data_files() {
    let f = fixture("external_weights");
    let ptd = f.ptd.clone().expect("external_weights has a .ptd");
    let parse = |b: &[u8]| {
        catch_unwind(|| {
            ProgramFile::from_bytes(b)
                .data_file()
                .map(|d| walk_data_file(&d))
        })
        .unwrap_or_else(|_| panic!("panicked"))
    };
    assert!(parse(&ptd).is_ok());
    expect_err(parse(&[]), "empty .ptd", &["too short"]);
    expect_err(parse(&ptd[..47]), "47-byte .ptd", &["too short"]);
    let step = (ptd.len() / 200).max(3);
    for cut in (48..ptd.len()).step_by(step) {
        expect_err(parse(&ptd[..cut]), &format!(".ptd truncated to {cut}"), &[]);
    }
    let len = ptd.len() as u64;
    let cases: [(&str, usize, Vec<u8>, &[&str]); 9] = [
        ("FH01 magic", 8, b"FH02".to_vec(), &["FH01"]),
        (
            "header_length 39",
            12,
            39u32.to_le_bytes().to_vec(),
            &["FH01"],
        ),
        (
            "flatbuffer past the end",
            24,
            len.to_le_bytes().to_vec(),
            &["flatbuffer"],
        ),
        (
            "flatbuffer offset u64::MAX",
            16,
            u64::MAX.to_le_bytes().to_vec(),
            &["flatbuffer"],
        ),
        (
            "segment base past the end",
            32,
            (len + 1).to_le_bytes().to_vec(),
            &["segment"],
        ),
        (
            "segment size u64::MAX",
            40,
            u64::MAX.to_le_bytes().to_vec(),
            &["segment"],
        ),
        (
            "root offset past the end",
            0,
            (len as u32).to_le_bytes().to_vec(),
            &["flatbuffer"],
        ),
        (
            "root offset u32::MAX",
            0,
            u32::MAX.to_le_bytes().to_vec(),
            &["flatbuffer"],
        ),
        ("identifier", 4, b"FT02".to_vec(), &["FT01"]),
    ];
    for (what, at, v, needles) in cases {
        expect_err(parse(&with_header(&ptd, at, &v)), what, needles);
    }
    // No segment data: the key's segment no longer fits.
    let b = with_header(&ptd, 40, &0u64.to_le_bytes());
    let d = ProgramFile::from_bytes(&b);
    let df = d.data_file().unwrap();
    let key = df.keys().next().expect("a key");
    expect_err(
        df.get(key).map(|_| ()).map_err(pteron::Error::from),
        "segment cut short",
        &["segment"],
    );
}
