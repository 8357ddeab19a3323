//! Calls: a callee's typed declaration ([`Decl`]), against which every
//! call's arguments are checked and which the module then declares
//! ([`Builder::module_text`]), and the intrinsics the kernels call, their
//! overloaded names derived from their types.

use super::{Builder, Ty, V};

/// A function declaration: name, return type (`None`: `void`), parameter
/// types with their attributes, and the function's attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Decl {
    name: String,
    ret: Option<Ty>,
    params: Vec<(Ty, &'static str)>,
    attrs: &'static str,
}

impl Decl {
    /// `declare ret @name(params…) attrs`; a parameter whose attributes
    /// include `immarg` takes only constants.
    pub(crate) fn new(
        name: impl Into<String>,
        ret: Option<Ty>,
        params: &[(Ty, &'static str)],
        attrs: &'static str,
    ) -> Decl {
        Decl {
            name: name.into(),
            ret,
            params: params.to_vec(),
            attrs,
        }
    }

    /// `llvm.fma` at the float type (or vector of floats) `t`.
    pub(crate) fn fma(t: Ty) -> Decl {
        assert!(t.elem().is_float(), "ir: `llvm.fma` at {t}");
        Decl::new(
            format!("llvm.fma.{}", t.mangle()),
            Some(t),
            &[(t, ""), (t, ""), (t, "")],
            "",
        )
    }

    /// `llvm.prefetch` of an `i8*`: (address, write, locality, data).
    pub(crate) fn prefetch() -> Decl {
        let p = Ty::I8.ptr();
        Decl::new(
            format!("llvm.prefetch.{}", p.mangle()),
            None,
            &[
                (p, "nocapture readonly"),
                (Ty::I32, ""),
                (Ty::I32, ""),
                (Ty::I32, ""),
            ],
            "",
        )
    }

    /// The vector `v` and its pointer and `<n x i1>` mask types (`what`
    /// needs a vector).
    fn masked(what: &str, v: Ty) -> (String, Ty, Ty) {
        let n = v.lanes().unwrap_or_else(|| panic!("ir: `{what}` of {v}"));
        let p = v.ptr();
        let name = format!("llvm.masked.{what}.{}.{}", v.mangle(), p.mangle());
        (name, p, Ty::I1.vec(n as usize))
    }

    /// `llvm.masked.load` of the vector type `v`: (address, alignment,
    /// mask, the value of the lanes not loaded).
    pub(crate) fn masked_load(v: Ty) -> Decl {
        let (name, p, m) = Decl::masked("load", v);
        let params = [(p, ""), (Ty::I32, "immarg"), (m, ""), (v, "")];
        Decl::new(name, Some(v), &params, "")
    }

    /// `llvm.masked.store` of the vector type `v`: (value, address,
    /// alignment, mask).
    pub(crate) fn masked_store(v: Ty) -> Decl {
        let (name, p, m) = Decl::masked("store", v);
        let params = [(v, ""), (p, ""), (Ty::I32, "immarg"), (m, "")];
        Decl::new(name, None, &params, "")
    }

    /// Its `declare` line.
    pub(super) fn declare(&self) -> String {
        let params: Vec<String> = self
            .params
            .iter()
            .map(|(t, a)| match *a {
                "" => t.to_string(),
                _ => format!("{t} {a}"),
            })
            .collect();
        let ret = self.ret.map_or("void".into(), |t| t.to_string());
        let attrs = match self.attrs {
            "" => String::new(),
            a => format!(" {a}"),
        };
        format!("declare {ret} @{}({}){attrs}", self.name, params.join(", "))
    }

    /// Panic unless `args` fit the parameters.
    fn check(&self, args: &[&V]) {
        assert!(
            args.len() == self.params.len(),
            "ir: @{} takes {} arguments, not {}",
            self.name,
            self.params.len(),
            args.len()
        );
        for (k, (a, (t, attrs))) in args.iter().zip(&self.params).enumerate() {
            assert!(
                a.ty == *t,
                "ir: argument {k} of @{} is {} {}, not {t}",
                self.name,
                a.ty,
                a.name
            );
            assert!(
                !attrs.contains("immarg") || a.is_const(),
                "ir: argument {k} of @{} must be a constant, not {}",
                self.name,
                a.name
            );
        }
    }
}

impl Builder {
    /// Note that the module declares `d` (once; a second declaration of
    /// the name must be the same).
    fn declare(&mut self, d: &Decl) {
        match self.decls.iter().find(|e| e.name == d.name) {
            Some(e) => assert!(e == d, "ir: @{} declared twice, differently", d.name),
            None => self.decls.push(d.clone()),
        }
    }

    /// The text of a call of `d` with `args`, checked.
    fn call_text(&mut self, d: &Decl, args: &[&V]) -> String {
        d.check(args);
        self.declare(d);
        let args: Vec<String> = args.iter().map(|a| a.typed()).collect();
        let ret = d.ret.map_or("void".into(), |t| t.to_string());
        format!("call {ret} @{}({})", d.name, args.join(", "))
    }

    /// `d(args…)`, `d` returning a value.
    pub(crate) fn call_to(&mut self, d: &Decl, args: &[&V]) -> V {
        let ret = d
            .ret
            .unwrap_or_else(|| panic!("ir: @{} returns void", d.name));
        let text = self.call_text(d, args);
        self.def(ret, text)
    }

    /// `d(args…)`, `d` returning `void`.
    pub(crate) fn call_void(&mut self, d: &Decl, args: &[&V]) {
        assert!(d.ret.is_none(), "ir: the value of @{} unused", d.name);
        let text = self.call_text(d, args);
        self.line(&text);
    }

    /// `call ret @callee(args…)` of a callee declared by the emitter
    /// itself (`crate::rt::DECLS`): the arguments are not checked.
    pub(crate) fn call(&mut self, ret: Ty, callee: &str, args: &[&V]) -> V {
        let args: Vec<String> = args.iter().map(|a| a.typed()).collect();
        self.def(ret, format!("call {ret} @{callee}({})", args.join(", ")))
    }

    // ---- intrinsics --------------------------------------------------------

    /// `a · b + c`, rounded once (floats or vectors of them).
    pub(crate) fn fma(&mut self, a: &V, b: &V, c: &V) -> V {
        self.call_to(&Decl::fma(a.ty), &[a, b, c])
    }

    /// Ask for the cache line of the `i8*` `p` in every cache level, to
    /// be read, or written when `write`.
    pub(crate) fn prefetch(&mut self, p: &V, write: bool) {
        let rw = V::int(Ty::I32, write as i64);
        let (locality, data) = (V::int(Ty::I32, 3), V::int(Ty::I32, 1));
        self.call_void(&Decl::prefetch(), &[p, &rw, &locality, &data]);
    }

    /// The lanes of the vector at `p` that `mask` sets (`p` aligned to
    /// `align`), the others `passthru`'s; a lane not set is not read.
    pub(crate) fn masked_load(&mut self, p: &V, align: u32, mask: &V, passthru: &V) -> V {
        let v = Self::pointee("masked load", p);
        let al = V::int(Ty::I32, align as i64);
        self.call_to(&Decl::masked_load(v), &[p, &al, mask, passthru])
    }

    /// Store the lanes of `x` that `mask` sets to the vector at `p`
    /// (aligned to `align`); a lane not set is not written.
    pub(crate) fn masked_store(&mut self, x: &V, p: &V, align: u32, mask: &V) {
        let al = V::int(Ty::I32, align as i64);
        self.call_void(&Decl::masked_store(x.ty), &[x, p, &al, mask]);
    }
}
