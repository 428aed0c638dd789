//! Byte sizes as written in the quota config: `"80GiB"`, `"1536MiB"`, `"4GB"`, `"1048576"`, or a TOML integer.

use std::fmt;

/// One mebibyte, the granularity of memory quotas.
pub const MIB: u64 = 1 << 20;

/// Why a size string was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// Empty string.
    #[error("empty size")]
    Empty,
    /// The number part is missing or not a non-negative decimal.
    #[error("`{0}` is not a size: expected a whole number followed by B, KiB, MiB, GiB, TiB, KB, MB, GB or TB")]
    Syntax(String),
    /// The unit is not one we know.
    #[error("`{text}`: unknown unit `{unit}` (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)")]
    Unit {
        /// The whole input.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// The value does not fit in 64 bits.
    #[error("`{0}` is too large")]
    Overflow(String),
    /// The value is not a whole number of MiB (quotas have 1 MiB granularity).
    #[error("{bytes} bytes is not a whole number of MiB (quotas have 1 MiB granularity)")]
    NotWholeMib {
        /// The value in bytes.
        bytes: u64,
    },
}

/// Multiplier for a unit suffix (case-sensitive for the binary `i` forms, lenient on case otherwise).
fn unit_multiplier(unit: &str) -> Option<u64> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    })
}

/// Parse a size: a whole decimal number, optional whitespace, optional unit.
///
/// Binary units (`KiB`, `MiB`, `GiB`, `TiB`) are powers of 1024; decimal units (`KB`, `MB`, `GB`, `TB`)
/// are powers of 1000, as their names say. No unit, or `B`, means bytes. Units are case-insensitive.
/// Fractions (`"1.5GiB"`) are refused: write `"1536MiB"`.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(SizeError::Empty);
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(SizeError::Syntax(text.to_string()));
    }
    let unit = unit.trim_start();
    let mult = unit_multiplier(unit).ok_or_else(|| {
        if unit.starts_with('.') || unit.starts_with(',') {
            SizeError::Syntax(text.to_string())
        } else {
            SizeError::Unit { text: text.to_string(), unit: unit.to_string() }
        }
    })?;
    let n: u64 = num.parse().map_err(|_| SizeError::Overflow(text.to_string()))?;
    n.checked_mul(mult).ok_or_else(|| SizeError::Overflow(text.to_string()))
}

/// Check that `bytes` is a whole number of MiB.
pub fn require_whole_mib(bytes: u64) -> Result<u64, SizeError> {
    if bytes.is_multiple_of(MIB) { Ok(bytes) } else { Err(SizeError::NotWholeMib { bytes }) }
}

/// Display helper: bytes as the largest exact binary unit (`4GiB`, `1536MiB`, `12345B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
            if b != 0 && b.is_multiple_of(1u64 << shift) {
                return write!(f, "{}{}", b >> shift, unit);
            }
        }
        write!(f, "{b}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("80GiB"), Ok(80 << 30));
        assert_eq!(parse_size("1536MiB"), Ok(1536 << 20));
        assert_eq!(parse_size("4GB"), Ok(4_000_000_000));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("12 KiB"), Ok(12 << 10));
        assert_eq!(parse_size("7b"), Ok(7));
        assert_eq!(parse_size("2gib"), Ok(2 << 30));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size(" 3MB "), Ok(3_000_000));
    }

    #[test]
    fn refusals() {
        assert_eq!(parse_size(""), Err(SizeError::Empty));
        assert!(matches!(parse_size("GiB"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("1.5GiB"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("-1"), Err(SizeError::Syntax(_))));
        assert!(matches!(parse_size("4 gigs"), Err(SizeError::Unit { .. })));
        assert!(matches!(parse_size("99999999999999999999"), Err(SizeError::Overflow(_))));
        assert!(matches!(parse_size("17000000TiB"), Err(SizeError::Overflow(_))));
    }

    #[test]
    fn mib_granularity() {
        assert_eq!(require_whole_mib(1536 << 20), Ok(1536 << 20));
        assert_eq!(require_whole_mib(0), Ok(0));
        assert_eq!(require_whole_mib(4_000_000_000), Err(SizeError::NotWholeMib { bytes: 4_000_000_000 }));
    }

    #[test]
    fn display() {
        assert_eq!(Bytes(4 << 30).to_string(), "4GiB");
        assert_eq!(Bytes(1536 << 20).to_string(), "1536MiB");
        assert_eq!(Bytes(12345).to_string(), "12345B");
        assert_eq!(Bytes(0).to_string(), "0B");
    }
}
