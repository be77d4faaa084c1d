#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("placeholder")]
    Placeholder,
}
