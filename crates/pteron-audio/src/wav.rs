//! RIFF/WAVE reading.
//!
//! Integer PCM of n bits maps to `v / 2^(n-1)` (8-bit is unsigned, offset 128), so 16-bit
//! samples equal what `soundfile`/`numpy` give (`int16 / 32768`). Float samples are taken as
//! they are. Several channels are averaged to mono. Chunks other than `fmt ` and `data` are
//! skipped; a `data` chunk that claims more bytes than the file holds (streamed writers leave
//! the size at 0 or 0xFFFFFFFF) is read up to the end of the file, in whole frames.

use std::path::Path;

use crate::{Error, Result};

/// Decoded audio: mono samples in [-1, 1] at `sample_rate`.
#[derive(Clone, Debug, PartialEq)]
pub struct Audio {
    pub samples: Vec<f32>,
    pub sample_rate: u32,
    /// Channels in the file (mixed down into `samples`).
    pub channels: u16,
    /// Bits per sample in the file.
    pub bits: u16,
    pub float: bool,
}

impl Audio {
    /// Duration in seconds.
    pub fn duration(&self) -> f64 {
        self.samples.len() as f64 / self.sample_rate as f64
    }
}

/// Why bytes are not a WAV file this reader can decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WavError {
    #[error("not a RIFF/WAVE file")]
    NotWave,
    #[error("truncated {0} chunk")]
    Truncated(&'static str),
    #[error("no fmt chunk before the data chunk")]
    NoFormat,
    #[error("no data chunk")]
    NoData,
    #[error("unsupported sample format: tag {tag:#06x}, {bits} bits")]
    Unsupported { tag: u16, bits: u16 },
    #[error("invalid format: {0}")]
    BadFormat(&'static str),
}

const PCM: u16 = 1;
const FLOAT: u16 = 3;
const EXTENSIBLE: u16 = 0xFFFE;

struct Format {
    tag: u16,
    channels: u16,
    rate: u32,
    block_align: u16,
    bits: u16,
}

/// Reads and decodes a WAV file.
pub fn read_wav(path: impl AsRef<Path>) -> Result<Audio> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| Error::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_wav(&bytes).map_err(|source| Error::Wav {
        path: path.display().to_string(),
        source,
    })
}

/// Decodes WAV bytes.
pub fn parse_wav(bytes: &[u8]) -> Result<Audio, WavError> {
    if bytes.len() < 12 || &bytes[0..4] != b"RIFF" || &bytes[8..12] != b"WAVE" {
        return Err(WavError::NotWave);
    }
    let mut pos = 12usize;
    let mut format: Option<Format> = None;
    while pos < bytes.len() {
        let header = bytes
            .get(pos..pos + 8)
            .ok_or(WavError::Truncated("chunk header"))?;
        let id = &header[0..4];
        let size = u32::from_le_bytes([header[4], header[5], header[6], header[7]]) as usize;
        let body_start = pos + 8;
        let available = bytes.len() - body_start;
        if id == b"data" {
            let fmt = format.ok_or(WavError::NoFormat)?;
            // Streamed files may claim more than there is: read what there is.
            let body = &bytes[body_start..body_start + size.min(available)];
            return decode(&fmt, body);
        }
        if size > available {
            return Err(WavError::Truncated(if id == b"fmt " {
                "fmt"
            } else {
                "other"
            }));
        }
        let body = &bytes[body_start..body_start + size];
        if id == b"fmt " {
            format = Some(parse_format(body)?);
        }
        // Chunks are padded to an even size.
        pos = body_start + size + (size & 1);
    }
    Err(WavError::NoData)
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn parse_format(b: &[u8]) -> Result<Format, WavError> {
    if b.len() < 16 {
        return Err(WavError::Truncated("fmt"));
    }
    let mut tag = le16(b, 0);
    let channels = le16(b, 2);
    let rate = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let block_align = le16(b, 12);
    let bits = le16(b, 14);
    if tag == EXTENSIBLE {
        // WAVEFORMATEXTENSIBLE: the sub-format GUID starts with the real format tag.
        if b.len() < 26 {
            return Err(WavError::Truncated("fmt"));
        }
        tag = le16(b, 24);
    }
    if channels == 0 {
        return Err(WavError::BadFormat("zero channels"));
    }
    if rate == 0 {
        return Err(WavError::BadFormat("zero sample rate"));
    }
    let supported = matches!((tag, bits), (PCM, 8 | 16 | 24 | 32) | (FLOAT, 32 | 64));
    if !supported {
        return Err(WavError::Unsupported { tag, bits });
    }
    // Containers wider than the sample (e.g. 24 bits in 4 bytes) are not handled.
    if block_align as usize != channels as usize * (bits as usize / 8) {
        return Err(WavError::BadFormat(
            "block align is not channels * bytes per sample",
        ));
    }
    Ok(Format {
        tag,
        channels,
        rate,
        block_align,
        bits,
    })
}

fn decode(fmt: &Format, data: &[u8]) -> Result<Audio, WavError> {
    let width = fmt.bits as usize / 8;
    let ch = fmt.channels as usize;
    let frames = data.len() / fmt.block_align as usize;
    let sample = |s: &[u8]| -> f32 {
        match (fmt.tag, fmt.bits) {
            (PCM, 8) => (s[0] as f32 - 128.0) / 128.0,
            (PCM, 16) => i16::from_le_bytes([s[0], s[1]]) as f32 / 32768.0,
            (PCM, 24) => {
                let v = i32::from_le_bytes([0, s[0], s[1], s[2]]) >> 8;
                v as f32 / 8_388_608.0
            }
            (PCM, 32) => {
                (i32::from_le_bytes([s[0], s[1], s[2], s[3]]) as f64 / 2_147_483_648.0) as f32
            }
            (FLOAT, 32) => f32::from_le_bytes([s[0], s[1], s[2], s[3]]),
            // (FLOAT, 64): parse_format allows nothing else.
            _ => f64::from_le_bytes([s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]]) as f32,
        }
    };
    let mut samples = Vec::with_capacity(frames);
    for frame in data.chunks_exact(fmt.block_align as usize) {
        if ch == 1 {
            samples.push(sample(frame));
        } else {
            let sum: f32 = frame.chunks_exact(width).map(sample).sum();
            samples.push(sum / ch as f32);
        }
    }
    Ok(Audio {
        samples,
        sample_rate: fmt.rate,
        channels: fmt.channels,
        bits: fmt.bits,
        float: fmt.tag == FLOAT,
    })
}

/// Encodes mono 16-bit PCM WAV bytes (for tests and tools).
pub fn encode_wav_i16(samples: &[i16], rate: u32) -> Vec<u8> {
    let data_len = samples.len() * 2;
    let mut out = Vec::with_capacity(44 + data_len);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&((36 + data_len) as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&PCM.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * 2).to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data_len as u32).to_le_bytes());
    for s in samples {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(tag: u16, channels: u16, rate: u32, bits: u16) -> Vec<u8> {
        let align = channels * bits / 8;
        let mut v = b"RIFF\0\0\0\0WAVEfmt ".to_vec();
        v.extend_from_slice(&16u32.to_le_bytes());
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&channels.to_le_bytes());
        v.extend_from_slice(&rate.to_le_bytes());
        v.extend_from_slice(&(rate * align as u32).to_le_bytes());
        v.extend_from_slice(&align.to_le_bytes());
        v.extend_from_slice(&bits.to_le_bytes());
        v
    }

    fn with_data(mut h: Vec<u8>, data: &[u8]) -> Vec<u8> {
        h.extend_from_slice(b"data");
        h.extend_from_slice(&(data.len() as u32).to_le_bytes());
        h.extend_from_slice(data);
        h
    }

    #[test]
    fn decodes_each_sample_format() {
        let cases: &[(u16, u16, Vec<u8>, Vec<f32>)] = &[
            (PCM, 8, vec![0, 128, 255], vec![-1.0, 0.0, 127.0 / 128.0]),
            (
                PCM,
                16,
                [-32768i16, 0, 16384]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                vec![-1.0, 0.0, 0.5],
            ),
            (
                PCM,
                24,
                vec![0, 0, 0x80, 0xff, 0xff, 0xff, 0, 0, 0x40],
                vec![-1.0, -1.0 / 8_388_608.0, 0.5],
            ),
            (
                PCM,
                32,
                [i32::MIN, 1 << 30]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                vec![-1.0, 0.5],
            ),
            (
                FLOAT,
                32,
                [0.25f32, -0.75]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
                vec![0.25, -0.75],
            ),
            (
                FLOAT,
                64,
                [0.125f64].iter().flat_map(|v| v.to_le_bytes()).collect(),
                vec![0.125],
            ),
        ];
        for (tag, bits, data, want) in cases {
            let a = parse_wav(&with_data(header(*tag, 1, 8000, *bits), data)).unwrap();
            assert_eq!(&a.samples, want, "tag {tag} bits {bits}");
            assert_eq!((a.sample_rate, a.channels, a.bits), (8000, 1, *bits));
        }
    }

    #[test]
    fn mixes_channels_and_skips_chunks() {
        let mut h = header(PCM, 2, 16000, 16);
        // An odd-sized LIST chunk with its pad byte.
        h.extend_from_slice(b"LIST\x03\0\0\0abc\0");
        let data: Vec<u8> = [16384i16, -16384, 8192, 8192]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let a = parse_wav(&with_data(h, &data)).unwrap();
        assert_eq!(a.samples, vec![0.0, 0.25]);
    }

    #[test]
    fn streamed_data_size_reads_whole_frames() {
        let mut v = header(PCM, 1, 16000, 16);
        v.extend_from_slice(b"data\xff\xff\xff\xff");
        v.extend_from_slice(&[0, 64, 0, 32, 7]); // 2.5 samples
        let a = parse_wav(&v).unwrap();
        assert_eq!(a.samples, vec![0.5, 0.25]);
    }

    #[test]
    fn malformed_inputs_are_typed_errors() {
        let good = with_data(header(PCM, 1, 16000, 16), &[0, 0]);
        assert_eq!(parse_wav(b"RIFF"), Err(WavError::NotWave));
        assert_eq!(
            parse_wav(&good[..14]),
            Err(WavError::Truncated("chunk header"))
        );
        assert_eq!(parse_wav(&good[..30]), Err(WavError::Truncated("fmt")));
        assert_eq!(parse_wav(&good[..36]), Err(WavError::NoData));
        let mut no_fmt = b"RIFF\0\0\0\0WAVE".to_vec();
        no_fmt.extend_from_slice(b"data\x02\0\0\0\0\0");
        assert_eq!(parse_wav(&no_fmt), Err(WavError::NoFormat));
        assert_eq!(
            parse_wav(&with_data(header(PCM, 1, 16000, 12), &[])),
            Err(WavError::Unsupported { tag: PCM, bits: 12 })
        );
        assert_eq!(
            parse_wav(&with_data(header(PCM, 0, 16000, 16), &[])),
            Err(WavError::BadFormat("zero channels"))
        );
        assert_eq!(
            parse_wav(&with_data(header(PCM, 1, 0, 16), &[])),
            Err(WavError::BadFormat("zero sample rate"))
        );
        // Every prefix of a valid file is an error or a shorter decode, never a panic.
        for n in 0..good.len() {
            let _ = parse_wav(&good[..n]);
        }
    }

    #[test]
    fn encode_round_trips() {
        let a = parse_wav(&encode_wav_i16(&[1, -2, 300], 22050)).unwrap();
        assert_eq!(a.sample_rate, 22050);
        assert_eq!(
            a.samples,
            vec![1.0 / 32768.0, -2.0 / 32768.0, 300.0 / 32768.0]
        );
    }
}
