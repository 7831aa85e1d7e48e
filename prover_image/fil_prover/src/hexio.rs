//! Bytes as `0x`-prefixed hex, the form every commitment, randomness and proof takes in JSON.

use crate::fail::{bad_input, Outcome};

/// `0x` and the bytes in lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}

/// The bytes of `0x<hex>`; bad input naming `field` otherwise.
pub fn parse_hex(field: &str, text: &str) -> Outcome<Vec<u8>> {
    let digits = text
        .strip_prefix("0x")
        .ok_or_else(|| bad_input(format!("{field}: {} does not start with 0x", shorten(text))))?;
    hex::decode(digits)
        .map_err(|error| bad_input(format!("{field}: {} is not hex: {error}", shorten(text))))
}

/// The 32 bytes of `0x<64 hex>`; bad input naming `field` otherwise.
pub fn parse_32(field: &str, text: &str) -> Outcome<[u8; 32]> {
    let bytes = parse_hex(field, text)?;
    let len = bytes.len();
    bytes.try_into().map_err(|_| {
        bad_input(format!(
            "{field}: {} has {len} bytes, expected 32 (0x and 64 hex digits)",
            shorten(text)
        ))
    })
}

/// At most 80 characters of `text`, for error messages.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((end, _)) => format!("{:?}...", &text[..end]),
        None => format!("{text:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let bytes = [0xab; 32];
        assert_eq!(parse_32("x", &to_hex(&bytes)).unwrap(), bytes);
    }

    #[test]
    fn errors_name_the_field() {
        assert!(parse_32("commR", "abcd")
            .unwrap_err()
            .message
            .starts_with("commR: "));
        assert!(parse_32("commR", "0xzz")
            .unwrap_err()
            .message
            .contains("not hex"));
        assert!(parse_32("commR", "0xabcd")
            .unwrap_err()
            .message
            .contains("2 bytes"));
    }
}
