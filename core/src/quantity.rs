//! Resource quantities added up exactly, and written as Kubernetes writes them (apimachinery's
//! `Quantity`: parsed with its suffixes, summed keeping the first addend's format, printed in
//! canonical form). A PodGroup's `minResources` is such a sum, and a CRD keeps the string it is
//! given, so the sum must be printed the way the Kubeflow operators' Go code prints it.

use std::collections::BTreeMap;
use std::fmt;

/// How a quantity is written: its suffix family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `k`, `M`, `m`, `n` ... or none.
    DecimalSi,
    /// `Ki`, `Mi`, `Gi` ...
    BinarySi,
    /// `1e3`.
    DecimalExponent,
}

/// A quantity in billionths, the finest unit Kubernetes keeps (it rounds finer values up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

/// Why a string is not a quantity.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a quantity (a number with an optional suffix such as m, k, Gi or e3)")]
    Malformed(String),
    #[error("{0:?} is too large a quantity")]
    TooLarge(String),
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// Larger than any resource a cluster has (10^27 units), small enough that sums of a few
/// thousand such values stay far inside an `i128` of billionths.
const LARGEST_NANOS: i128 = 10i128.pow(36);

const DECIMAL_SUFFIXES: [(&str, i32); 10] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];

const BINARY_SUFFIXES: [(&str, u32); 6] = [
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

impl Quantity {
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSi,
    };

    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let malformed = || QuantityError::Malformed(text.to_owned());
        let too_large = || QuantityError::TooLarge(text.to_owned());
        let (negative, unsigned) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            Some(_) => (false, text),
            None => return Err(malformed()),
        };
        let number_end = unsigned
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(unsigned.len());
        let (number, suffix) = unsigned.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if fraction.contains('.') || (whole.is_empty() && fraction.is_empty() && !number.is_empty())
        {
            return Err(malformed());
        }
        if number.is_empty() {
            return Err(malformed());
        }
        // The digits as an integer and the power of ten that scales them.
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 38 {
            return Err(too_large());
        }
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| malformed())?
        };
        let mut exponent = -i32::try_from(fraction.len()).map_err(|_| too_large())?;
        let (format, binary_shift) =
            if let Some(&(_, shift)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
                (Format::BinarySi, shift)
            } else if let Some(&(_, power)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == suffix) {
                exponent += power;
                (Format::DecimalSi, 0)
            } else if let Some(power) = suffix
                .strip_prefix(['e', 'E'])
                .and_then(|p| p.parse::<i32>().ok())
                .filter(|p| (-40..=40).contains(p))
            {
                exponent += power;
                (Format::DecimalExponent, 0)
            } else {
                return Err(malformed());
            };
        if mantissa == 0 {
            return Self::bounded(negative, 0, format, text);
        }
        let mut nanos = mantissa.checked_shl(binary_shift).ok_or_else(too_large)?;
        if nanos >> binary_shift != mantissa {
            return Err(too_large());
        }
        let scale = exponent + 9;
        if scale >= 0 {
            let factor = 10i128
                .checked_pow(scale.unsigned_abs())
                .ok_or_else(too_large)?;
            nanos = nanos.checked_mul(factor).ok_or_else(too_large)?;
        } else {
            // Finer than a billionth: rounded up, as Kubernetes does.
            let Some(divisor) = 10i128.checked_pow(scale.unsigned_abs()) else {
                nanos = i128::from(nanos != 0);
                return Self::bounded(negative, nanos, format, text);
            };
            nanos = nanos / divisor + i128::from(nanos % divisor != 0);
        }
        Self::bounded(negative, nanos, format, text)
    }

    fn bounded(
        negative: bool,
        nanos: i128,
        format: Format,
        text: &str,
    ) -> Result<Self, QuantityError> {
        if nanos > LARGEST_NANOS {
            return Err(QuantityError::TooLarge(text.to_owned()));
        }
        // A binary quantity below one is written in decimal (Kubernetes' parser does the same).
        let format = if format == Format::BinarySi && nanos < NANOS_PER_UNIT {
            Format::DecimalSi
        } else {
            format
        };
        Ok(Self {
            nanos: if negative { -nanos } else { nanos },
            format,
        })
    }

    /// `count` times this quantity.
    pub fn times(self, count: i64) -> Self {
        Self {
            nanos: self.nanos.saturating_mul(i128::from(count)),
            format: self.format,
        }
    }

    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// Compares the values, whatever their formats.
    pub fn cmp_value(&self, other: &Self) -> std::cmp::Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl fmt::Display for Quantity {
    /// The canonical form: the largest suffix that keeps the number whole (`1500m`, `2k`,
    /// `1536Mi`), binary only for whole numbers of at least 1024.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let binary = self.format == Format::BinarySi
            && self.nanos.unsigned_abs() >= 1024 * NANOS_PER_UNIT.unsigned_abs()
            && self.nanos % NANOS_PER_UNIT == 0;
        if binary {
            let mut units = self.nanos / NANOS_PER_UNIT;
            let mut suffix = "";
            for (name, _) in BINARY_SUFFIXES {
                if units % 1024 != 0 {
                    break;
                }
                units /= 1024;
                suffix = name;
            }
            return write!(f, "{units}{suffix}");
        }
        let (mut mantissa, mut exponent) = (self.nanos, -9i32);
        while mantissa % 10 == 0 {
            mantissa /= 10;
            exponent += 1;
        }
        // Down to a multiple of three, so that a decimal suffix names it.
        while exponent.rem_euclid(3) != 0 {
            mantissa *= 10;
            exponent -= 1;
        }
        let suffix = DECIMAL_SUFFIXES.iter().find(|(_, p)| *p == exponent);
        match (self.format, suffix) {
            (Format::DecimalExponent, _) | (_, None) if exponent != 0 => {
                write!(f, "{mantissa}e{exponent}")
            }
            (_, Some((name, _))) => write!(f, "{mantissa}{name}"),
            _ => write!(f, "{mantissa}"),
        }
    }
}

impl std::ops::Add for Quantity {
    type Output = Self;

    /// The sum, in this quantity's format unless it is zero (Kubernetes' `Quantity.Add`).
    fn add(self, other: Self) -> Self {
        Self {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }
}

/// Resources by name, each a sum.
pub type ResourceSums = BTreeMap<String, Quantity>;

/// Adds `quantity` to the `name` entry of `sums`.
pub fn add_to(sums: &mut ResourceSums, name: &str, quantity: Quantity) {
    let sum = sums.get(name).copied().unwrap_or(Quantity::ZERO);
    sums.insert(name.to_owned(), sum + quantity);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn canonical(text: &str) -> String {
        Quantity::parse(text)
            .map(|q| q.to_string())
            .unwrap_or_else(|e| e.to_string())
    }

    fn sum(texts: &[&str]) -> String {
        texts
            .iter()
            .map(|t| Quantity::parse(t).unwrap_or(Quantity::ZERO))
            .fold(Quantity::ZERO, |sum, q| sum + q)
            .to_string()
    }

    #[test]
    fn parses_and_prints_as_kubernetes_does() {
        for (text, printed) in [
            ("0", "0"),
            ("1", "1"),
            ("1000m", "1"),
            ("1500m", "1500m"),
            ("0.5", "500m"),
            ("2000", "2k"),
            ("1500", "1500"),
            ("1Gi", "1Gi"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("512Ki", "512Ki"),
            ("0.5Ki", "512"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("100n", "100n"),
            ("0.1n", "1n"),
            ("4G", "4G"),
            ("-2", "-2"),
            ("+3", "3"),
            ("1.5Gi", "1536Mi"),
            ("3e-3", "3e-3"),
            ("2e2", "200"),
            ("12345678k", "12345678k"),
        ] {
            assert_eq!(canonical(text), printed, "{text}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_quantity() {
        for text in [
            "",
            "Gi",
            "1.2.3",
            "1Xi",
            "abc",
            "1 Gi",
            "-",
            "1e999",
            "99999999999999999999999999999999999999999",
        ] {
            assert!(Quantity::parse(text).is_err(), "{text} parsed");
        }
    }

    #[test]
    fn sums_keep_the_first_addends_format() {
        assert_eq!(sum(&["1", "500m"]), "1500m");
        assert_eq!(sum(&["1Gi", "1Gi"]), "2Gi");
        assert_eq!(sum(&["1Gi", "512Mi"]), "1536Mi");
        assert_eq!(sum(&["1G", "1Gi"]), "2073741824");
        assert_eq!(sum(&["0", "1Gi"]), "1Gi");
        assert_eq!(
            Quantity::parse("2Gi").map(|q| q.times(4).to_string()),
            Ok("8Gi".to_owned())
        );
    }

    proptest! {
        #[test]
        fn printing_and_parsing_again_keeps_the_value(units in -1_000_000i64..1_000_000, milli in 0i64..1000) {
            let text = format!("{units}.{milli:03}");
            let parsed = Quantity::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let again = Quantity::parse(&parsed.to_string()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(parsed.nanos, again.nanos);
        }

        #[test]
        fn never_panics(text in ".{0,40}") {
            let _ = Quantity::parse(&text).map(|q| (q + q).times(1000).to_string());
        }
    }
}
