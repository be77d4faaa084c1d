//! A multimodal program's vision encoder: what image it takes, and turning a picture into the
//! embeddings the text decoder reads.
//!
//! ExecuTorch's multimodal recipes (LLaVA's `export_llava`) write `vision_encoder(image) ->
//! embeddings [1, m, dim]` beside `token_embedding` and `text_decoder`; ExecuTorch's
//! `MultimodalRunner` hands it the picture as uint8 `[3, H, W]` and prefills the text decoder
//! with its output. The program does its own padding, rescaling and normalization; the host
//! resizes (LLaVA's `prepare_image`: torchvision's antialiased bilinear resize to the largest
//! size that fits in the crop and keeps the aspect).

use pteron::{Dynamism, Method, Output, ScalarType, ValueSpec as Value};
use pteron_image::{fit_within, Image};

use crate::{Error, Result};

/// The image a vision encoder takes: uint8 planar RGB of at most `max_width × max_height`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VisionInput {
    pub max_width: usize,
    pub max_height: usize,
    /// Whether smaller sizes are taken (a dynamic shape bounded by the maximum) or only the
    /// maximum.
    pub dynamic: bool,
    /// `[1, 3, H, W]` rather than `[3, H, W]`.
    batched: bool,
}

impl VisionInput {
    /// The size (width, height) a `width × height` picture is resized to. A dynamic input
    /// takes LLaVA's `prepare_image` size with each side rounded down to even: the recipe
    /// declares the sides as `2 · Dim(...)`, and its graph computes the padding from the
    /// halved size (ExecuTorch's runtime refuses an odd side). A static input takes its
    /// size.
    pub fn size_for(&self, width: usize, height: usize) -> (usize, usize) {
        if !self.dynamic {
            return (self.max_width, self.max_height);
        }
        let (w, h) = fit_within(width, height, self.max_width, self.max_height);
        let even = |s: usize| (s - s % 2).max(2);
        (even(w).min(self.max_width), even(h).min(self.max_height))
    }
}

/// The `vision_encoder` method and the shape of its input.
pub(crate) struct Vision<'a> {
    pub method: Method<'a>,
    pub input: VisionInput,
    /// Planar bytes of the last resized picture (kept: no allocation after the first).
    pixels: Vec<u8>,
}

impl<'a> Vision<'a> {
    pub fn new(method: Method<'a>, dim: usize) -> Result<Self> {
        if method.num_inputs() != 1 {
            return Err(Error::Model(format!(
                "vision_encoder takes {} inputs; expected one image",
                method.num_inputs()
            )));
        }
        let unsupported = |what: String| {
            Error::Model(format!(
                "vision_encoder takes {what}; pteron runs encoders that take a uint8 image \
                 [3, H, W] or [1, 3, H, W] (ExecuTorch's LLaVA recipe)"
            ))
        };
        let spec = match method.input_spec(0) {
            Some(Value::Tensor(t)) => *t,
            _ => return Err(unsupported("a value that is not a tensor".into())),
        };
        let sizes = spec.info.sizes();
        let batched = match sizes {
            [3, _, _] => false,
            [1, 3, _, _] => true,
            _ => return Err(unsupported(format!("a tensor of sizes {sizes:?}"))),
        };
        if spec.info.dtype() != ScalarType::Byte {
            return Err(unsupported(format!("a {} tensor", spec.info.dtype())));
        }
        let n = sizes.len();
        let (max_height, max_width) = (sizes[n - 2], sizes[n - 1]);
        if max_height == 0 || max_width == 0 {
            return Err(unsupported(format!("a tensor of sizes {sizes:?}")));
        }
        // The output's width must be the decoder's (checked again on each call, where the
        // planned output may not be known before the first).
        if let Ok(Output::Tensor(t)) = method.output(0) {
            if t.info.sizes().last().is_some_and(|&d| d != dim) {
                return Err(Error::Model(format!(
                    "vision_encoder returns {:?}, the text decoder takes embeddings of width {dim}",
                    t.info.sizes()
                )));
            }
        }
        Ok(Vision {
            method,
            input: VisionInput {
                max_width,
                max_height,
                dynamic: spec.dynamism != Dynamism::Static,
                batched,
            },
            pixels: Vec::new(),
        })
    }

    /// Resizes `image` as the input asks and runs the encoder; the embeddings are the method's
    /// output 0 (`[1, m, dim]`).
    pub fn encode(&mut self, image: &Image) -> Result<()> {
        let (w, h) = self.input.size_for(image.width(), image.height());
        self.pixels.clear();
        if (w, h) == (image.width(), image.height()) {
            self.pixels.extend_from_slice(image.planar());
        } else {
            let resized = image
                .resize(w, h)
                .map_err(|e| Error::Model(e.to_string()))?;
            self.pixels.extend_from_slice(resized.planar());
        }
        let dims = [1, 3, h, w];
        let dims = if self.input.batched {
            &dims[..]
        } else {
            &dims[1..]
        };
        self.method
            .set_input_tensor(0, ScalarType::Byte, dims, &self.pixels)?;
        self.method.execute()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_fit_the_crop_and_are_even() {
        let v = VisionInput {
            max_width: 112,
            max_height: 112,
            dynamic: true,
            batched: false,
        };
        assert_eq!(v.size_for(200, 150), (112, 84));
        assert_eq!(v.size_for(97, 160), (66, 112)); // 67 rounded down
        assert_eq!(v.size_for(1, 5000), (2, 110)); // (1, 111)
        assert_eq!(v.size_for(112, 112), (112, 112));
        let s = VisionInput {
            dynamic: false,
            ..v
        };
        assert_eq!(s.size_for(97, 160), (112, 112));
    }
}
