//! A value within the element cap that the machine cannot hold is a typed
//! `OutOfMemory`, never an allocation abort (issue #10: "runtime never
//! panics on user input"). The test re-runs itself in a child process whose
//! address space is capped with `setrlimit(RLIMIT_AS)`, so the refusal is
//! deterministic whatever memory the machine has.

use std::process::Command;

use tc_core::dtype::Dtype;
use tc_runtime::{interp::denote, Elem, Error, Tensor};

const CHILD: &str = "TC_OOM_CHILD";
/// The child's address-space cap: far below the 2 GiB its requests need.
const CAP: u64 = 768 << 20;

#[test]
#[cfg_attr(miri, ignore = "spawns a process and calls setrlimit")]
fn allocations_past_the_address_space_are_typed_errors() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    // This test's name as the harness lists it: its module path without
    // the crate (the test binary holds several files, one module each).
    let path = concat!(
        module_path!(),
        "::allocations_past_the_address_space_are_typed_errors"
    );
    let name = path.split_once("::").map_or(path, |(_, name)| name);
    let out = Command::new(std::env::current_exe().expect("own path"))
        .args(["--exact", name])
        .args(["--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .output()
        .expect("spawn the child");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{text}");
    assert_eq!(text.matches("OOM ok").count(), 3, "{text}");
}

fn expect_oom<T>(what: &str, r: Result<T, Error>) {
    match r {
        Err(Error::OutOfMemory { bytes }) => {
            assert!(bytes >= 1 << 30, "{what}: {bytes} bytes");
            println!("OOM ok: {what}");
        }
        Err(e) => panic!("{what}: expected OutOfMemory, got {e}"),
        Ok(_) => panic!("{what}: succeeded under a {CAP}-byte address space"),
    }
}

fn child() {
    let lim = libc::rlimit {
        rlim_cur: CAP,
        rlim_max: CAP,
    };
    // SAFETY: `lim` is a valid rlimit that lives across the call; lowering
    // this process's own limit affects nothing else.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
    // 2^28 f32 = 1 GiB of storage: within the element cap, over the space.
    let n = 1usize << 28;
    expect_oom("Tensor::full", Tensor::full(Dtype::F32, &[n], Elem::F(1.0)));
    // 2^26 bool = 64 MiB of storage (fits); decoded, 2^26 × 16 B = 1 GiB.
    let m = 1usize << 26;
    let b = Tensor::full(Dtype::Bool, &[m], Elem::B(true)).expect("64 MiB fits");
    expect_oom("Tensor::try_to_elems", b.try_to_elems());
    expect_oom("interpreter cast", denote::cast(Dtype::I8, &b));
}
