//! Image input for vision models run by pteron.
//!
//! A vision-language program exported by ExecuTorch's recipes takes the picture as a uint8
//! tensor `[3, H, W]` (planar RGB) that the host has already resized; the program pads,
//! rescales and normalizes it itself. This crate does the host's part:
//!
//! - [`Image::decode`]: PNG and JPEG bytes to planar RGB (pure-Rust decoders; grey images are
//!   replicated to three channels, alpha is dropped, as PIL's `convert("RGB")` does; EXIF
//!   orientation is not applied, as PIL's `Image.open` does not).
//! - [`Image::resize`]: torchvision's `Resize` of a uint8 tensor (bilinear with antialiasing):
//!   the same fixed-point arithmetic, so the bytes equal torchvision's.
//! - [`fit_within`]: the size LLaVA's `prepare_image` resizes to (the largest that fits in the
//!   canvas and keeps the aspect).

mod resize;

use resize::resize_planar;

/// Largest side accepted from an encoded file: bigger pictures are refused before their
/// pixels are allocated.
pub const MAX_SIDE: u32 = 16_384;
/// Most bytes a decoder may allocate.
#[cfg(feature = "decode")]
const MAX_DECODE_BYTES: u64 = 512 << 20;

/// Errors of image input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("image: cannot decode: {0}")]
    Decode(String),
    #[error("image: {width}×{height} is not a usable size (1 to {MAX_SIDE} pixels a side)")]
    Size { width: u64, height: u64 },
    #[error("image: {got} bytes of pixels for {width}×{height}×3 ({want} expected)")]
    Length {
        width: usize,
        height: usize,
        got: usize,
        want: usize,
    },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A planar RGB picture: `data` is `[3, height, width]` bytes, red plane first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    width: usize,
    height: usize,
    data: Vec<u8>,
}

impl Image {
    /// Takes planar `[3, height, width]` bytes.
    pub fn from_planar(width: usize, height: usize, data: Vec<u8>) -> Result<Self> {
        check_size(width as u64, height as u64)?;
        let want = width * height * 3; // both ≤ MAX_SIDE: no overflow
        if data.len() != want {
            return Err(Error::Length {
                width,
                height,
                got: data.len(),
                want,
            });
        }
        Ok(Image {
            width,
            height,
            data,
        })
    }

    #[cfg(feature = "decode")]
    /// Decodes PNG or JPEG bytes (the format is told by the content).
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let mut reader = image::ImageReader::new(std::io::Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| Error::Decode(e.to_string()))?;
        let mut limits = image::Limits::default();
        limits.max_image_width = Some(MAX_SIDE);
        limits.max_image_height = Some(MAX_SIDE);
        limits.max_alloc = Some(MAX_DECODE_BYTES);
        reader.limits(limits);
        let decoded = reader.decode().map_err(|e| Error::Decode(e.to_string()))?;
        let rgb = decoded.to_rgb8();
        let (w, h) = (rgb.width() as usize, rgb.height() as usize);
        check_size(w as u64, h as u64)?;
        let plane = w * h;
        let mut data = vec![0u8; plane * 3];
        for (i, px) in rgb.as_raw().chunks_exact(3).enumerate() {
            data[i] = px[0];
            data[plane + i] = px[1];
            data[2 * plane + i] = px[2];
        }
        Image::from_planar(w, h, data)
    }

    #[cfg(feature = "decode")]
    /// Reads and decodes a PNG or JPEG file.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Image::decode(&bytes)
    }

    pub fn width(&self) -> usize {
        self.width
    }
    pub fn height(&self) -> usize {
        self.height
    }
    /// Planar `[3, height, width]` bytes.
    pub fn planar(&self) -> &[u8] {
        &self.data
    }

    /// torchvision's `Resize((height, width))` of this picture as a uint8 tensor (bilinear,
    /// antialiased): bit-exact with torchvision on the CPU.
    pub fn resize(&self, width: usize, height: usize) -> Result<Image> {
        check_size(width as u64, height as u64)?;
        let data = resize_planar(&self.data, 3, self.height, self.width, height, width);
        Image::from_planar(width, height, data)
    }
}

fn check_size(width: u64, height: u64) -> Result<()> {
    let side = 1..=MAX_SIDE as u64;
    if side.contains(&width) && side.contains(&height) {
        Ok(())
    } else {
        Err(Error::Size { width, height })
    }
}

/// The size (width, height) LLaVA's `prepare_image` resizes a `width`×`height` picture to: the
/// largest that fits in `max_width`×`max_height` with the picture's aspect, each side
/// truncated to whole pixels (as Python's `int(side / ratio)`), at least one pixel.
pub fn fit_within(
    width: usize,
    height: usize,
    max_width: usize,
    max_height: usize,
) -> (usize, usize) {
    if width == 0 || height == 0 || max_width == 0 || max_height == 0 {
        return (max_width.max(1), max_height.max(1));
    }
    let ratio = (height as f64 / max_height as f64).max(width as f64 / max_width as f64);
    let side = |s: usize| ((s as f64 / ratio) as usize).max(1);
    (side(width), side(height))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_keeps_the_aspect_and_truncates() {
        assert_eq!(fit_within(200, 150, 112, 112), (112, 84));
        assert_eq!(fit_within(97, 160, 112, 112), (67, 112));
        assert_eq!(fit_within(50, 40, 112, 112), (112, 89)); // enlarged
        assert_eq!(fit_within(1, 5000, 112, 112), (1, 111));
    }

    #[test]
    fn planar_bytes_are_checked() {
        assert!(matches!(
            Image::from_planar(2, 2, vec![0; 11]),
            Err(Error::Length { want: 12, .. })
        ));
        assert!(matches!(
            Image::from_planar(0, 2, vec![]),
            Err(Error::Size { .. })
        ));
        #[cfg(feature = "decode")]
        assert!(Image::decode(b"not an image").is_err());
    }

    /// A PNG whose header declares a picture larger than [`MAX_SIDE`] is refused before any
    /// pixel memory is allocated (the header is valid, CRC included).
    #[cfg(feature = "decode")]
    #[test]
    fn oversized_headers_are_refused() {
        fn crc32(bytes: &[u8]) -> u32 {
            let mut c = !0u32;
            for &b in bytes {
                c ^= b as u32;
                for _ in 0..8 {
                    c = if c & 1 != 0 {
                        0xEDB8_8320 ^ (c >> 1)
                    } else {
                        c >> 1
                    };
                }
            }
            !c
        }
        for (w, h) in [(MAX_SIDE + 1, 1), (1, u32::MAX / 2), (60_000, 60_000)] {
            let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
            let mut ihdr = b"IHDR".to_vec();
            ihdr.extend_from_slice(&w.to_be_bytes());
            ihdr.extend_from_slice(&h.to_be_bytes());
            ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8-bit RGB
            png.extend_from_slice(&13u32.to_be_bytes());
            png.extend_from_slice(&ihdr);
            png.extend_from_slice(&crc32(&ihdr).to_be_bytes());
            let mut end = b"IEND".to_vec();
            png.extend_from_slice(&0u32.to_be_bytes());
            png.append(&mut end);
            png.extend_from_slice(&crc32(b"IEND").to_be_bytes());
            let err = Image::decode(&png).unwrap_err().to_string();
            assert!(err.contains("limit"), "{w}x{h}: {err}");
        }
    }

    #[cfg(feature = "decode")]
    #[test]
    fn png_round_trip_is_planar() {
        let mut png = Vec::new();
        let rgb = image::RgbImage::from_fn(3, 2, |x, y| image::Rgb([x as u8, y as u8, 7]));
        rgb.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .unwrap();
        let img = Image::decode(&png).unwrap();
        assert_eq!((img.width(), img.height()), (3, 2));
        assert_eq!(
            img.planar(),
            &[0, 1, 2, 0, 1, 2, 0, 0, 0, 1, 1, 1, 7, 7, 7, 7, 7, 7]
        );
    }
}
