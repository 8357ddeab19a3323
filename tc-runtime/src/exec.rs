//! Convenience entry points: call a tensor fn on concrete arguments through
//! the runtime contract and the Section 4 reference interpreter.

use std::collections::BTreeMap;

use tc_core::ir::Function;

use crate::contract::Arg;
use crate::error::{Error, Result};
use crate::interp::Interpreter;
use crate::tensor::Tensor;

/// Bind `func`'s contract on `args` (Section 2 §14, §16, §17), interpret its
/// body (Section 4) and return its value. Calls in the body resolve through
/// `resolve`. The heap invariant is checked when `TC_CHECK_HEAP` is set.
pub fn call<'f>(
    func: &Function,
    args: &[Arg],
    resolve: &dyn Fn(&str) -> Option<&'f Function>,
) -> Result<Tensor> {
    Interpreter::from_env().run(func, args, resolve)
}

/// A set of tensor fns that may call each other by name (a `#[tensor_module]`).
#[derive(Clone, Debug, Default)]
pub struct Module {
    fns: BTreeMap<String, Function>,
    interp: Option<Interpreter>,
}

impl Module {
    /// A module of these functions, keyed by their signatures' names.
    pub fn new(fns: impl IntoIterator<Item = Function>) -> Module {
        Module {
            fns: fns.into_iter().map(|f| (f.sig.name.clone(), f)).collect(),
            interp: None,
        }
    }

    /// Use these interpreter settings instead of [`Interpreter::from_env`].
    pub fn with_interpreter(mut self, interp: Interpreter) -> Module {
        self.interp = Some(interp);
        self
    }

    /// Add (or replace) a function.
    pub fn insert(&mut self, f: Function) {
        self.fns.insert(f.sig.name.clone(), f);
    }

    /// The function called `name`.
    pub fn get(&self, name: &str) -> Option<&Function> {
        self.fns.get(name)
    }

    /// Call `name` on `args`.
    pub fn call(&self, name: &str, args: &[Arg]) -> Result<Tensor> {
        let f = self
            .get(name)
            .ok_or_else(|| Error::UnknownFunction(name.to_string()))?;
        let interp = self.interp.unwrap_or_else(Interpreter::from_env);
        interp.run(f, args, &|n| self.fns.get(n))
    }
}
