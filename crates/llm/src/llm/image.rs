//! Images in the conversation: an image the person put in a prompt, or one
//! an MCP tool returned. They travel beside a message's text and reach the
//! model only when its provider accepts images; anywhere else the model is
//! told, in words, that an image was left out and why — it must never
//! guess at a picture it did not get.
//!
//! Whether a model accepts images is the provider entry's `images` setting
//! when set, otherwise a guess from the wire format and the model's name
//! ([`guess_accepts_images`]): Anthropic's models all do; for
//! OpenAI-compatible servers only names that say so (a local text model
//! sent an image fails the whole request).

use serde::{Deserialize, Serialize};

use crate::protocol::ProviderKind;

/// The most base64 bytes one image may have (about 5 MB of picture, the
/// smallest limit among the providers' APIs). A larger one is left out.
pub const MAX_IMAGE_BASE64_BYTES: usize = 7 * 1024 * 1024;

/// The most images one message may carry; the rest are left out.
pub const MAX_IMAGES_PER_MESSAGE: usize = 16;

/// Tokens an image is counted as when a request's size is estimated (the
/// providers charge between a few hundred and about 1,600 for one).
pub const IMAGE_TOKENS: u64 = 1_600;

/// The picture formats every provider with images takes.
const FORMATS: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];

/// One image, base64-encoded as the protocols carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub mime_type: String,
    /// Standard base64, no line breaks.
    pub data: String,
}

/// Why an image cannot travel at all (whatever the model).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("an image of type {0} (the models take PNG, JPEG, GIF and WebP)")]
    Format(String),
    #[error(
        "an image of {0} bytes of base64, over the limit of {MAX_IMAGE_BASE64_BYTES} \
         (MAX_IMAGE_BASE64_BYTES)"
    )]
    TooLarge(usize),
    #[error("an image whose data is not base64")]
    NotBase64,
    #[error(
        "an image past the {MAX_IMAGES_PER_MESSAGE} one message may carry (MAX_IMAGES_PER_MESSAGE)"
    )]
    TooMany,
}

impl Image {
    /// An image checked against what every provider takes.
    pub fn new(mime_type: &str, data: &str) -> Result<Image, ImageError> {
        let mime_type = mime_type.trim().to_ascii_lowercase();
        if !FORMATS.contains(&mime_type.as_str()) {
            return Err(ImageError::Format(mime_type));
        }
        let data: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
        if data.len() > MAX_IMAGE_BASE64_BYTES {
            return Err(ImageError::TooLarge(data.len()));
        }
        let base64 = |c: char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '=');
        if data.is_empty() || !data.len().is_multiple_of(4) || !data.chars().all(base64) {
            return Err(ImageError::NotBase64);
        }
        Ok(Image { mime_type, data })
    }

    /// The image as a `data:` URL (OpenAI's formats take these).
    pub fn data_url(&self) -> String {
        format!("data:{};base64,{}", self.mime_type, self.data)
    }

    /// How many bytes of picture the base64 holds.
    pub fn bytes(&self) -> usize {
        let padding = self.data.bytes().rev().take_while(|b| *b == b'=').count();
        (self.data.len() / 4 * 3).saturating_sub(padding)
    }
}

/// Up to [`MAX_IMAGES_PER_MESSAGE`] images that could be made, and a line
/// for each one that could not (for the message's text).
pub fn collect(
    found: impl IntoIterator<Item = Result<Image, ImageError>>,
) -> (Vec<Image>, Vec<String>) {
    let mut images = Vec::new();
    let mut notes = Vec::new();
    for image in found {
        match image {
            Ok(_) if images.len() == MAX_IMAGES_PER_MESSAGE => {
                notes.push(format!("[left out: {}]", ImageError::TooMany));
            }
            Ok(image) => images.push(image),
            Err(e) => notes.push(format!("[left out: {e}]")),
        }
    }
    (images, notes)
}

/// Whether a model takes images, when its provider entry does not say.
pub fn guess_accepts_images(kind: ProviderKind, model: &str) -> bool {
    if kind == ProviderKind::Anthropic {
        return true;
    }
    let model = model.to_ascii_lowercase();
    // Hosted families that take images, and the local vision models'
    // usual names (Ollama, llama.cpp, vLLM).
    const PREFIXES: &[&str] = &["gpt-4o", "gpt-4.1", "gpt-5", "o3", "o4", "claude-"];
    const WORDS: &[&str] = &[
        "vision",
        "llava",
        "bakllava",
        "moondream",
        "-vl",
        "pixtral",
        "gemma3",
        "minicpm-v",
        "gemini",
    ];
    let name = model.rsplit('/').next().unwrap_or(&model);
    PREFIXES.iter().any(|p| name.starts_with(p)) || WORDS.iter().any(|w| name.contains(w))
}

/// What the model reads instead of images its provider does not take.
pub fn omitted_note(images: &[Image], model: &str) -> String {
    let list: Vec<String> = images
        .iter()
        .map(|i| format!("{}, {} bytes", i.mime_type, i.bytes()))
        .collect();
    format!(
        "[{} image{} left out ({}): the model {model} is not known to accept images; \
         `images = true` in its [[providers]] entry sends them]",
        images.len(),
        if images.len() == 1 { "" } else { "s" },
        list.join("; ")
    )
}

/// `text` with the images' note after it, when there are images.
pub fn text_with_note(text: &str, images: &[Image], model: &str) -> String {
    if images.is_empty() {
        return text.to_string();
    }
    let note = omitted_note(images, model);
    if text.is_empty() {
        note
    } else {
        format!("{text}\n{note}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_checked_for_format_size_and_encoding() {
        assert!(Image::new("image/PNG", "iVBORw0KGgo=").is_ok());
        assert_eq!(
            Image::new("image/tiff", "AAAA"),
            Err(ImageError::Format("image/tiff".into()))
        );
        assert_eq!(
            Image::new("image/png", "not base64!"),
            Err(ImageError::NotBase64)
        );
        let big = "A".repeat(MAX_IMAGE_BASE64_BYTES + 4);
        assert_eq!(
            Image::new("image/png", &big),
            Err(ImageError::TooLarge(MAX_IMAGE_BASE64_BYTES + 4))
        );
        // Line breaks, as some encoders add them, are not part of the data.
        assert_eq!(
            Image::new("image/png", "AAAA\nAAAA").unwrap().data,
            "AAAAAAAA"
        );
    }

    #[test]
    fn past_the_limit_images_are_left_out_with_a_note() {
        let many = (0..MAX_IMAGES_PER_MESSAGE + 2).map(|_| Image::new("image/png", "AAAA"));
        let (images, notes) = collect(many);
        assert_eq!(images.len(), MAX_IMAGES_PER_MESSAGE);
        assert_eq!(notes.len(), 2);
        assert!(notes[0].contains("MAX_IMAGES_PER_MESSAGE"), "{}", notes[0]);
    }

    #[test]
    fn vision_models_are_recognised_and_text_models_are_not() {
        for model in [
            "gpt-4o-mini",
            "gpt-5",
            "llava:13b",
            "qwen2.5-vl-7b",
            "library/gemma3:4b",
        ] {
            assert!(guess_accepts_images(ProviderKind::OpenAi, model), "{model}");
        }
        for model in [
            "llama3.1:8b",
            "qwen2.5-coder",
            "deepseek-chat",
            "fake-model",
        ] {
            assert!(
                !guess_accepts_images(ProviderKind::OpenAi, model),
                "{model}"
            );
        }
        assert!(guess_accepts_images(ProviderKind::Anthropic, "anything"));
    }
}
