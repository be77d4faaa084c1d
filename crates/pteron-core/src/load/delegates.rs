//! Delegate initialisation: each `ExecutionPlan.delegates` entry's backend is looked up by id
//! in the load options' [`crate::BackendRegistry`] (none: [`Error::BackendMissing`]) and
//! initialised with its processed payload, compile specs and named data; the backend parses,
//! checks and packs there, once. A backend's refusal is an [`Error::Delegate`].

use alloc::string::String;
use alloc::string::ToString;
use alloc::vec::Vec;
use core::cell::RefCell;

use pteron_format::{schema, FormatError};

use crate::backend::{BackendInit, CompileSpec, NamedDataMap, ProgramNamedData};
use crate::error::{Error, KernelError, Result};
use crate::instr::Delegates;
use crate::options::LoadOptions;
use crate::source::DataSources;

/// Named data that remembers the bytes it handed out (to release their pages after a backend
/// packed them).
struct RecordingNamedData<'p> {
    inner: ProgramNamedData<'p>,
    handed_out: RefCell<Vec<&'p [u8]>>,
}

impl<'p> NamedDataMap<'p> for RecordingNamedData<'p> {
    fn get(&self, key: &str) -> core::result::Result<Option<&'p [u8]>, FormatError> {
        let got = self.inner.get(key)?;
        if let (Some(b), Ok(mut log)) = (got, self.handed_out.try_borrow_mut()) {
            log.push(b);
        }
        Ok(got)
    }
}

/// Looks up each delegate's backend and initialises it (payload, compile specs, named data).
// A load stage, called once: not inlined, which keeps firmware smaller (size_test).
#[inline(never)]
pub(crate) fn init_delegates<'p>(
    src: &DataSources<'p>,
    plan: &schema::ExecutionPlan<'p>,
    method_name: &str,
    options: &LoadOptions,
) -> Result<Delegates<'p>> {
    let mut delegates = Delegates::default();
    let named = RecordingNamedData {
        inner: ProgramNamedData {
            program: src.program,
            external: src.external,
        },
        handed_out: RefCell::new(Vec::new()),
    };
    let num_threads = options.num_threads();
    for (i, d) in plan.delegates().into_iter().flatten().enumerate() {
        let id = d.id().unwrap_or("");
        let backend = options
            .backends
            .get(id)
            .ok_or_else(|| Error::BackendMissing {
                backend: id.to_string(),
            })?;
        let name = delegate_name(id, i);
        let fail = |source: KernelError| Error::Delegate {
            delegate: name.clone(),
            source,
        };
        let processed = d
            .processed()
            .ok_or_else(|| fail(KernelError::invalid("no processed payload")))?;
        let processed = src.program.delegate_data(processed)?;
        let mut specs = Vec::new();
        for s in d.compile_specs().into_iter().flatten() {
            specs.push(CompileSpec {
                key: s.key().unwrap_or(""),
                value: s.value().map_or(&[][..], |v| v.bytes()),
            });
        }
        let init = BackendInit {
            method_name,
            delegate_index: i,
            processed,
            compile_specs: &specs,
            named_data: &named,
            num_threads,
            config: options.config,
        };
        let handle = backend.init(&init).map_err(fail)?;
        delegates.push(name, handle);
        // A backend packs what it needs at init: the payload and the named data it read may
        // leave resident memory (pages a handle still reads fault back in).
        if let Some(release) = src.release {
            release.release(processed);
            let read = named
                .handed_out
                .try_borrow_mut()
                .map(|mut v| core::mem::take(&mut *v))
                .unwrap_or_default();
            for bytes in read {
                release.release(bytes);
            }
        }
    }
    Ok(delegates)
}

/// `"<backend id> delegate <i>"`, built without `core::fmt` (which loading otherwise does not
/// link: firmware size).
fn delegate_name(id: &str, i: usize) -> String {
    let mut digits = [0u8; 20];
    let mut n = i;
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut name = String::from(id);
    name.push_str(" delegate ");
    name.extend(digits[at..].iter().map(|&d| d as char));
    name
}

#[cfg(test)]
mod tests {
    #[test]
    fn delegate_names() {
        assert_eq!(
            super::delegate_name("XnnpackBackend", 0),
            "XnnpackBackend delegate 0"
        );
        assert_eq!(super::delegate_name("", 907), " delegate 907");
        let max = super::delegate_name("b", usize::MAX);
        assert_eq!(max, alloc::format!("b delegate {}", usize::MAX));
    }
}
