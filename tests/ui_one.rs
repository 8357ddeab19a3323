#[test]
fn one() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/calls/dim_arg_mismatch.rs");
}
