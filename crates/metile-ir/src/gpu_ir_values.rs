//! [`ValueList`]: the operand and result lists of GPU IR ops.
//!
//! Almost every op has at most four operands and one result, and a GEMM lowers
//! to hundreds of ops, so a heap `Vec` per list made allocation a large share of
//! compile time (building, copying and dropping ops). Short lists are stored
//! inline; longer ones (only `make_vector` could reach four, nothing reaches
//! more today) fall back to the heap, so no op shape is ruled out.

use crate::gpu_ir::GpuValue;
use std::fmt;
use std::ops::{Deref, DerefMut};

const INLINE: usize = 4;

/// A list of values that derefs to `[GpuValue]`.
#[derive(Clone)]
pub enum ValueList {
    Inline { len: u8, values: [GpuValue; INLINE] },
    Heap(Vec<GpuValue>),
}

impl ValueList {
    pub const fn new() -> ValueList {
        ValueList::Inline {
            len: 0,
            values: [GpuValue(0); INLINE],
        }
    }

    pub fn from_slice(values: &[GpuValue]) -> ValueList {
        if values.len() <= INLINE {
            let mut inline = [GpuValue(0); INLINE];
            inline[..values.len()].copy_from_slice(values);
            ValueList::Inline {
                len: values.len() as u8,
                values: inline,
            }
        } else {
            ValueList::Heap(values.to_vec())
        }
    }

    pub fn as_slice(&self) -> &[GpuValue] {
        self
    }

    pub fn push(&mut self, v: GpuValue) {
        match self {
            ValueList::Inline { len, values } if usize::from(*len) < INLINE => {
                values[usize::from(*len)] = v;
                *len += 1;
            }
            ValueList::Inline { len, values } => {
                let mut heap = values[..usize::from(*len)].to_vec();
                heap.push(v);
                *self = ValueList::Heap(heap);
            }
            ValueList::Heap(heap) => heap.push(v),
        }
    }
}

impl Default for ValueList {
    fn default() -> ValueList {
        ValueList::new()
    }
}

impl Deref for ValueList {
    type Target = [GpuValue];

    fn deref(&self) -> &[GpuValue] {
        match self {
            ValueList::Inline { len, values } => &values[..usize::from(*len)],
            ValueList::Heap(heap) => heap,
        }
    }
}

impl DerefMut for ValueList {
    fn deref_mut(&mut self) -> &mut [GpuValue] {
        match self {
            ValueList::Inline { len, values } => &mut values[..usize::from(*len)],
            ValueList::Heap(heap) => heap,
        }
    }
}

/// Equal when the values are, however they are stored.
impl PartialEq for ValueList {
    fn eq(&self, other: &ValueList) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for ValueList {}

impl fmt::Debug for ValueList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl From<Vec<GpuValue>> for ValueList {
    fn from(values: Vec<GpuValue>) -> ValueList {
        if values.len() <= INLINE {
            ValueList::from_slice(&values)
        } else {
            ValueList::Heap(values)
        }
    }
}

impl From<&[GpuValue]> for ValueList {
    fn from(values: &[GpuValue]) -> ValueList {
        ValueList::from_slice(values)
    }
}

impl<const N: usize> From<[GpuValue; N]> for ValueList {
    fn from(values: [GpuValue; N]) -> ValueList {
        ValueList::from_slice(&values)
    }
}

impl FromIterator<GpuValue> for ValueList {
    fn from_iter<I: IntoIterator<Item = GpuValue>>(iter: I) -> ValueList {
        let mut list = ValueList::new();
        for v in iter {
            list.push(v);
        }
        list
    }
}

impl<'a> IntoIterator for &'a ValueList {
    type Item = &'a GpuValue;
    type IntoIter = std::slice::Iter<'a, GpuValue>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut ValueList {
    type Item = &'a mut GpuValue;
    type IntoIter = std::slice::IterMut<'a, GpuValue>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_lists_hold_the_same_values() {
        let values: Vec<GpuValue> = (0..7).map(GpuValue).collect();
        for n in 0..values.len() {
            let list = ValueList::from(values[..n].to_vec());
            assert_eq!(list.as_slice(), &values[..n]);
            let pushed: ValueList = values[..n].iter().copied().collect();
            assert_eq!(pushed, list);
            assert_eq!(matches!(list, ValueList::Heap(_)), n > INLINE);
        }
    }
}
