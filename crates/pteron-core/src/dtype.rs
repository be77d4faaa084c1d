//! Scalar types as the `.pte` schema numbers them, and the Rust element types that carry them.

use core::fmt;

/// ExecuTorch's `ScalarType` (`schema/scalar_type.fbs`), with the same discriminants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i8)]
pub enum ScalarType {
    Byte = 0,
    Char = 1,
    Short = 2,
    Int = 3,
    Long = 4,
    Half = 5,
    Float = 6,
    Double = 7,
    ComplexHalf = 8,
    ComplexFloat = 9,
    ComplexDouble = 10,
    Bool = 11,
    QInt8 = 12,
    QUInt8 = 13,
    QInt32 = 14,
    BFloat16 = 15,
    QUInt4x2 = 16,
    QUInt2x4 = 17,
    Bits1x8 = 18,
    Bits2x4 = 19,
    Bits4x2 = 20,
    Bits8 = 21,
    Bits16 = 22,
    Float8E5M2 = 23,
    Float8E4M3FN = 24,
    Float8E5M2FNUZ = 25,
    Float8E4M3FNUZ = 26,
    UInt16 = 27,
    UInt32 = 28,
    UInt64 = 29,
}

impl ScalarType {
    /// Decodes a schema value; `None` for numbers the runtime does not know.
    pub fn from_i8(v: i8) -> Option<Self> {
        use ScalarType::*;
        Some(match v {
            0 => Byte,
            1 => Char,
            2 => Short,
            3 => Int,
            4 => Long,
            5 => Half,
            6 => Float,
            7 => Double,
            8 => ComplexHalf,
            9 => ComplexFloat,
            10 => ComplexDouble,
            11 => Bool,
            12 => QInt8,
            13 => QUInt8,
            14 => QInt32,
            15 => BFloat16,
            16 => QUInt4x2,
            17 => QUInt2x4,
            18 => Bits1x8,
            19 => Bits2x4,
            20 => Bits4x2,
            21 => Bits8,
            22 => Bits16,
            23 => Float8E5M2,
            24 => Float8E4M3FN,
            25 => Float8E5M2FNUZ,
            26 => Float8E4M3FNUZ,
            27 => UInt16,
            28 => UInt32,
            29 => UInt64,
            _ => return None,
        })
    }

    /// Decodes the integer PyTorch passes for a `ScalarType` argument (`dtype=` kwargs);
    /// the numbering is the same as the schema's.
    pub fn from_i64(v: i64) -> Option<Self> {
        i8::try_from(v).ok().and_then(Self::from_i8)
    }

    /// Bytes per element.
    pub fn elem_size(self) -> usize {
        use ScalarType::*;
        match self {
            Byte | Char | Bool | QInt8 | QUInt8 | QUInt4x2 | QUInt2x4 | Bits1x8 | Bits2x4
            | Bits4x2 | Bits8 | Float8E5M2 | Float8E4M3FN | Float8E5M2FNUZ | Float8E4M3FNUZ => 1,
            Short | Half | BFloat16 | Bits16 | UInt16 | ComplexHalf => 2,
            Int | Float | QInt32 | UInt32 => 4,
            Long | Double | UInt64 | ComplexFloat => 8,
            ComplexDouble => 16,
        }
    }

    /// PyTorch's name for the dtype (`torch.float32` → "float32").
    pub fn name(self) -> &'static str {
        use ScalarType::*;
        match self {
            Byte => "uint8",
            Char => "int8",
            Short => "int16",
            Int => "int32",
            Long => "int64",
            Half => "float16",
            Float => "float32",
            Double => "float64",
            ComplexHalf => "complex32",
            ComplexFloat => "complex64",
            ComplexDouble => "complex128",
            Bool => "bool",
            QInt8 => "qint8",
            QUInt8 => "quint8",
            QInt32 => "qint32",
            BFloat16 => "bfloat16",
            QUInt4x2 => "quint4x2",
            QUInt2x4 => "quint2x4",
            Bits1x8 => "bits1x8",
            Bits2x4 => "bits2x4",
            Bits4x2 => "bits4x2",
            Bits8 => "bits8",
            Bits16 => "bits16",
            Float8E5M2 => "float8_e5m2",
            Float8E4M3FN => "float8_e4m3fn",
            Float8E5M2FNUZ => "float8_e5m2fnuz",
            Float8E4M3FNUZ => "float8_e4m3fnuz",
            UInt16 => "uint16",
            UInt32 => "uint32",
            UInt64 => "uint64",
        }
    }

    pub fn is_floating(self) -> bool {
        matches!(
            self,
            ScalarType::Half | ScalarType::Float | ScalarType::Double | ScalarType::BFloat16
        )
    }

    pub fn is_integral(self, include_bool: bool) -> bool {
        use ScalarType::*;
        match self {
            Byte | Char | Short | Int | Long | UInt16 | UInt32 | UInt64 => true,
            Bool => include_bool,
            _ => false,
        }
    }

    /// The dtypes pteron's kernels compute with (everything else is storage-only for now).
    pub const REAL_AND_BOOL: [ScalarType; 10] = [
        ScalarType::Byte,
        ScalarType::Char,
        ScalarType::Short,
        ScalarType::Int,
        ScalarType::Long,
        ScalarType::Half,
        ScalarType::Float,
        ScalarType::Double,
        ScalarType::BFloat16,
        ScalarType::Bool,
    ];
}

/// A set of scalar types, as a bitmask over the schema numbers (all are < 32). Kernels declare
/// the dtypes they compute in with one (`pteron ops` lists them).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct DtypeSet(u32);

impl DtypeSet {
    pub const EMPTY: DtypeSet = DtypeSet(0);
    /// float32, float64, float16, bfloat16.
    pub const FLOAT: DtypeSet = DtypeSet::of(&[
        ScalarType::Float,
        ScalarType::Double,
        ScalarType::Half,
        ScalarType::BFloat16,
    ]);
    /// uint8, int8, int16, int32, int64.
    pub const INT: DtypeSet = DtypeSet::of(&[
        ScalarType::Byte,
        ScalarType::Char,
        ScalarType::Short,
        ScalarType::Int,
        ScalarType::Long,
    ]);
    pub const BOOL: DtypeSet = DtypeSet::of(&[ScalarType::Bool]);
    /// Every float and integer type, no bool.
    pub const REAL: DtypeSet = DtypeSet::FLOAT.union(DtypeSet::INT);
    /// Every dtype pteron's kernels compute with.
    pub const ALL: DtypeSet = DtypeSet::REAL.union(DtypeSet::BOOL);
    /// Integers and bool (bitwise ops).
    pub const INT_AND_BOOL: DtypeSet = DtypeSet::INT.union(DtypeSet::BOOL);

    pub const fn of(types: &[ScalarType]) -> DtypeSet {
        let mut bits = 0u32;
        let mut i = 0;
        while i < types.len() {
            bits |= 1 << (types[i] as i8 as u32);
            i += 1;
        }
        DtypeSet(bits)
    }
    pub const fn union(self, other: DtypeSet) -> DtypeSet {
        DtypeSet(self.0 | other.0)
    }
    pub const fn contains(self, t: ScalarType) -> bool {
        let n = t as i8 as u32;
        n < 32 && self.0 & (1 << n) != 0
    }
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The members, in schema order.
    pub fn iter(self) -> impl Iterator<Item = ScalarType> {
        (0..32i64)
            .filter_map(ScalarType::from_i64)
            .filter(move |t| self.contains(*t))
    }
}

impl fmt::Debug for DtypeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(|t| t.name()))
            .finish()
    }
}

impl fmt::Display for ScalarType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// PyTorch's bool storage: one byte, 0 or 1. A newtype so that generic kernels can tell it
/// from `u8` (uint8) and so that conversions into it produce only 0 or 1.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    bytemuck::Pod,
    bytemuck::Zeroable,
)]
#[repr(transparent)]
pub struct Bool(pub u8);

impl Bool {
    pub fn get(self) -> bool {
        self.0 != 0
    }
}

impl From<bool> for Bool {
    fn from(b: bool) -> Self {
        Bool(b as u8)
    }
}

/// A Rust type that stores the elements of tensors of one `ScalarType`.
///
/// Conversions follow C++ `static_cast` as PyTorch does for `.to(dtype)`: float → int truncates
/// toward zero (out-of-range values saturate here instead of being undefined), int → bool is `!= 0`.
pub trait Element:
    bytemuck::Pod + Default + PartialOrd + Send + Sync + fmt::Debug + 'static
{
    const DTYPE: ScalarType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_i64(self) -> i64;
    fn from_i64(v: i64) -> Self;
    fn to_bool(self) -> bool;
    fn from_bool(v: bool) -> Self;
}

macro_rules! int_element {
    ($t:ty, $st:ident) => {
        impl Element for $t {
            const DTYPE: ScalarType = ScalarType::$st;
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                // `as` saturates and maps NaN to 0: defined behaviour where C++ has none.
                v as $t
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                // Wrapping, as C++ integral conversion.
                v as $t
            }
            #[inline]
            fn to_bool(self) -> bool {
                self != 0
            }
            #[inline]
            fn from_bool(v: bool) -> Self {
                v as $t
            }
        }
    };
}
int_element!(u8, Byte);
int_element!(i8, Char);
int_element!(i16, Short);
int_element!(i32, Int);
int_element!(i64, Long);
int_element!(u16, UInt16);
int_element!(u32, UInt32);
int_element!(u64, UInt64);

macro_rules! float_element {
    ($t:ty, $st:ident) => {
        impl Element for $t {
            const DTYPE: ScalarType = ScalarType::$st;
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            #[inline]
            fn to_bool(self) -> bool {
                self != 0.0
            }
            #[inline]
            fn from_bool(v: bool) -> Self {
                v as u8 as $t
            }
        }
    };
}
float_element!(f32, Float);
float_element!(f64, Double);

macro_rules! half_element {
    ($t:ty, $st:ident) => {
        impl Element for $t {
            const DTYPE: ScalarType = ScalarType::$st;
            #[inline]
            fn to_f64(self) -> f64 {
                self.to_f64()
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            #[inline]
            fn to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            #[inline]
            fn from_i64(v: i64) -> Self {
                <$t>::from_f64(v as f64)
            }
            #[inline]
            fn to_bool(self) -> bool {
                self.to_f64() != 0.0
            }
            #[inline]
            fn from_bool(v: bool) -> Self {
                <$t>::from_f64(v as u8 as f64)
            }
        }
    };
}
half_element!(half::f16, Half);
half_element!(half::bf16, BFloat16);

impl Element for Bool {
    const DTYPE: ScalarType = ScalarType::Bool;
    #[inline]
    fn to_f64(self) -> f64 {
        self.get() as u8 as f64
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        Bool((v != 0.0) as u8)
    }
    #[inline]
    fn to_i64(self) -> i64 {
        self.get() as i64
    }
    #[inline]
    fn from_i64(v: i64) -> Self {
        Bool((v != 0) as u8)
    }
    #[inline]
    fn to_bool(self) -> bool {
        self.get()
    }
    #[inline]
    fn from_bool(v: bool) -> Self {
        Bool(v as u8)
    }
}

/// Calls `$body` with `$T` bound to the element type of `$dtype`, for the dtypes pteron computes
/// with; evaluates `$fallback` for every other dtype.
///
/// ```ignore
/// dispatch_dtype!(dtype, T => my_kernel::<T>(x, y), _ => return Err(unsupported))
/// ```
#[macro_export]
macro_rules! dispatch_dtype {
    ($dtype:expr, $T:ident => $body:expr, _ => $fallback:expr) => {{
        use $crate::dtype::ScalarType as __St;
        match $dtype {
            __St::Byte => {
                type $T = u8;
                $body
            }
            __St::Char => {
                type $T = i8;
                $body
            }
            __St::Short => {
                type $T = i16;
                $body
            }
            __St::Int => {
                type $T = i32;
                $body
            }
            __St::Long => {
                type $T = i64;
                $body
            }
            __St::Half => {
                type $T = $crate::half::f16;
                $body
            }
            __St::Float => {
                type $T = f32;
                $body
            }
            __St::Double => {
                type $T = f64;
                $body
            }
            __St::BFloat16 => {
                type $T = $crate::half::bf16;
                $body
            }
            __St::Bool => {
                type $T = $crate::dtype::Bool;
                $body
            }
            _ => $fallback,
        }
    }};
}

/// Like [`dispatch_dtype!`] but only for the floating dtypes (f16, bf16, f32, f64).
#[macro_export]
macro_rules! dispatch_float {
    ($dtype:expr, $T:ident => $body:expr, _ => $fallback:expr) => {{
        use $crate::dtype::ScalarType as __St;
        match $dtype {
            __St::Half => {
                type $T = $crate::half::f16;
                $body
            }
            __St::Float => {
                type $T = f32;
                $body
            }
            __St::Double => {
                type $T = f64;
                $body
            }
            __St::BFloat16 => {
                type $T = $crate::half::bf16;
                $body
            }
            _ => $fallback,
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_numbers_round_trip() {
        for v in 0..30i8 {
            let t = ScalarType::from_i8(v).unwrap();
            assert_eq!(t as i8, v);
        }
        assert_eq!(ScalarType::from_i8(30), None);
        assert_eq!(ScalarType::from_i8(-1), None);
    }

    #[test]
    fn element_sizes_match_rust_types() {
        assert_eq!(ScalarType::Float.elem_size(), core::mem::size_of::<f32>());
        assert_eq!(ScalarType::BFloat16.elem_size(), 2);
        assert_eq!(ScalarType::Bool.elem_size(), core::mem::size_of::<Bool>());
        assert_eq!(ScalarType::Long.elem_size(), 8);
    }

    #[test]
    fn conversions_are_defined_for_out_of_range() {
        assert_eq!(<u8 as Element>::from_f64(300.0), 255);
        assert_eq!(<i32 as Element>::from_f64(f64::NAN), 0);
        assert_eq!(<i8 as Element>::from_f64(-3.7), -3);
        assert_eq!(Bool::from_f64(0.5), Bool(1));
        assert_eq!(Bool::from_i64(0), Bool(0));
    }
}
