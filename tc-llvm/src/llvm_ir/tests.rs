//! The builder's checks: derived result types, and a panic for each
//! ill-typed or malformed construct.

use super::*;

fn reg(b: &mut Builder, ty: Ty) -> V {
    V::new(ty, b.fresh())
}

#[test]
fn result_types_are_derived() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::Float);
    let i = reg(&mut b, Ty::I16);
    assert_eq!(b.fadd(&x, &x).ty, Ty::Float);
    assert_eq!(b.fcmp("uno", &x, &x).ty, Ty::I1);
    assert_eq!(b.icmp("slt", &i, &V::int(Ty::I16, 0)).ty, Ty::I1);
    assert_eq!(b.sext(&i, Ty::I64).ty, Ty::I64);
    assert_eq!(b.bitcast(&x, Ty::I32).ty, Ty::I32);
    let p = V::new(Ty::I16.ptr(), "%p");
    let q = b.gep(&p, &[&V::i64("3")]);
    assert_eq!(q.ty, Ty::Ptr(&Ty::I16));
    assert_eq!(b.load(&q).ty, Ty::I16);
    let tab = V::new(Ty::Ptr(&Ty::Array(256, &Ty::I32)), "@tab");
    let e = b.gep(&tab, &[&V::i64("0"), &V::i64("%k")]);
    assert_eq!(e.ty, Ty::Ptr(&Ty::I32));
    let c = b.fcmp("olt", &x, &x);
    assert_eq!(b.select(&c, &i, &i).ty, Ty::I16);
    assert!(b.body.contains("= fadd float %t1, %t1\n"));
    assert!(b.body.contains("= sext i16 %t2 to i64\n"));
    assert!(b
        .body
        .contains("= getelementptr inbounds [256 x i32], [256 x i32]* @tab, i64 0, i64 %k\n"));
}

#[test]
fn hoisted_values_are_memoized_in_the_entry_block() {
    let mut b = Builder::default();
    let one = b.const_f32(1.0);
    assert_eq!(b.const_f32(1.0), one);
    assert_eq!(one.ty, Ty::Float);
    assert_eq!(
        b.pre,
        format!("  {one} = bitcast i32 1065353216 to float\n")
    );
    assert!(b.body.is_empty());
}

#[test]
#[should_panic(expected = "`fadd` operands differ in type: float %t1 vs i32 %t2")]
fn mismatched_binop_operands_panic() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::Float);
    let i = reg(&mut b, Ty::I32);
    b.fadd(&x, &i);
}

#[test]
#[should_panic(expected = "`add` on float")]
fn int_op_on_floats_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::Float);
    b.add(&x, &x);
}

#[test]
#[should_panic(expected = "`sext` from i64 %t1 to i32 is ill-typed")]
fn narrowing_extension_panics() {
    let mut b = Builder::default();
    let i = reg(&mut b, Ty::I64);
    b.sext(&i, Ty::I32);
}

#[test]
#[should_panic(expected = "`store` of i32 %t1 through float* %p")]
fn store_through_wrong_pointer_panics() {
    let mut b = Builder::default();
    let i = reg(&mut b, Ty::I32);
    b.store(&i, &V::new(Ty::Float.ptr(), "%p"));
}

#[test]
#[should_panic(expected = "`select` condition float")]
fn non_i1_select_condition_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::Float);
    b.select(&x, &x, &x);
}

#[test]
fn vector_types_are_spelled_and_derived() {
    let mut b = Builder::default();
    let v = Ty::Float.vec(16);
    assert_eq!(v.to_string(), "<16 x float>");
    assert_eq!(v.ptr().to_string(), "<16 x float>*");
    assert_eq!(
        (v.mangle(), v.ptr().mangle()),
        ("v16f32".into(), "p0v16f32".into())
    );
    let x = reg(&mut b, v);
    assert_eq!(b.fmul(&x, &x).ty, v);
    let m = b.fcmp("olt", &x, &x);
    assert_eq!(m.ty, Ty::I1.vec(16));
    assert_eq!(b.select(&m, &x, &x).ty, v);
    let s = reg(&mut b, Ty::Float);
    let ins = b.insertelement(&V::undef(v), &s, &V::int(Ty::I32, 0));
    let splat = b.shufflevector(&ins, &V::undef(v), &V::zeroinit(Ty::I32.vec(8)));
    assert_eq!(splat.ty, Ty::Float.vec(8));
    assert_eq!(b.extractelement(&x, &V::int(Ty::I32, 3)).ty, Ty::Float);
    let w = reg(&mut b, Ty::I32.vec(8));
    assert_eq!(b.bitcast(&w, Ty::I16.vec(16)).ty, Ty::I16.vec(16));
    assert_eq!(b.sext(&w, Ty::I64.vec(8)).ty, Ty::I64.vec(8));
    let p = V::new(Ty::Float.ptr(), "%p");
    let q = b.bitcast(&p, v.ptr());
    let l = b.load_align(&q, 4);
    b.store_align(&l, &q, 4);
    let iota = V::int_vec(Ty::I64, &[0, 1]);
    assert_eq!(iota.typed(), "<2 x i64> <i64 0, i64 1>");
    assert!(b.body.contains("= load <16 x float>, <16 x float>* %t"));
    assert!(b.body.contains(", align 4\n  store <16 x float> %t"));
    assert!(b.body.contains(
        "= shufflevector <16 x float> %t6, <16 x float> undef, <8 x i32> zeroinitializer\n"
    ));
}

/// A counted loop built with block handles, an open phi, loop metadata
/// and declared intrinsics: the whole module's text.
#[test]
fn a_loop_function_and_its_module() {
    let mut b = Builder::default();
    let n = b.param(Ty::I64, "n", "");
    let p = b.param(Ty::Float.ptr(), "p", "noalias");
    let entry = b.entry();
    b.switch_to(&entry);
    let (body, done) = (b.new_block("loop"), b.new_block("loop"));
    assert_eq!(
        (body.to_string(), done.to_string()),
        ("%loop".into(), "%loop.1".into())
    );
    let p8 = b.named("p8").bitcast(&p, Ty::I8.ptr());
    b.prefetch(&p8, false);
    b.br(&body);
    b.switch_to(&body);
    let i = b
        .named("i")
        .phi_open(&[(V::int(Ty::I64, 0), entry.clone())]);
    let x = b.load(&p);
    let y = b.fma(&x, &x, &x);
    b.store(&y, &p);
    let i1 = b.named("i1").add_nuw_nsw(i.value(), &V::int(Ty::I64, 1));
    let more = b.icmp("ult", &i1, &n);
    b.cond_br_loop(&more, &body, &done, LoopMd::unroll_count(2));
    b.phi_close(i, &[(i1, body.clone())]);
    b.switch_to(&done);
    b.ret_void();
    let f = b.define_void("f", "#0");
    assert_eq!(
        b.module_text(&f, "attributes #0 = { nounwind }\n"),
        "declare void @llvm.prefetch.p0i8(i8* nocapture readonly, i32, i32, i32)
declare float @llvm.fma.f32(float, float, float)

define void @f(i64 %n, float* noalias %p) #0 {
entry:
  %p8 = bitcast float* %p to i8*
  call void @llvm.prefetch.p0i8(i8* %p8, i32 0, i32 3, i32 1)
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %t1 = load float, float* %p
  %t2 = call float @llvm.fma.f32(float %t1, float %t1, float %t1)
  store float %t2, float* %p
  %i1 = add nuw nsw i64 %i, 1
  %t3 = icmp ult i64 %i1, %n
  br i1 %t3, label %loop, label %loop.1, !llvm.loop !0
loop.1:
  ret void
}

attributes #0 = { nounwind }
!0 = distinct !{!0, !1}
!1 = !{!\"llvm.loop.unroll.count\", i32 2}
"
    );
}

#[test]
fn masked_memory_is_checked_against_its_declaration() {
    let mut b = Builder::default();
    let v = Ty::I32.vec(8);
    let q = V::new(v.ptr(), "%q");
    let lanes = reg(&mut b, Ty::I64.vec(8));
    let mask = b.icmp("ult", &V::int_vec(Ty::I64, &[0; 8]), &lanes);
    let old = b.masked_load(&q, 1, &mask, &V::zeroinit(v));
    b.masked_store(&old, &q, 1, &mask);
    assert!(b.body.contains(
        "= call <8 x i32> @llvm.masked.load.v8i32.p0v8i32(<8 x i32>* %q, i32 1, <8 x i1> %t2, <8 x i32> zeroinitializer)\n"
    ));
    assert_eq!(
        b.module_text("", ""),
        "declare <8 x i32> @llvm.masked.load.v8i32.p0v8i32(<8 x i32>*, i32 immarg, <8 x i1>, <8 x i32>)
declare void @llvm.masked.store.v8i32.p0v8i32(<8 x i32>, <8 x i32>*, i32 immarg, <8 x i1>)

"
    );
}

#[test]
#[should_panic(expected = "`fadd` operands differ in type: <8 x float> %t1 vs <16 x float> %t2")]
fn vector_binop_with_mismatched_lanes_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::Float.vec(8));
    let y = reg(&mut b, Ty::Float.vec(16));
    b.fadd(&x, &y);
}

#[test]
#[should_panic(expected = "`select` condition <8 x i1> %t1 for <16 x float> %t2")]
fn select_with_mismatched_mask_lanes_panics() {
    let mut b = Builder::default();
    let c = reg(&mut b, Ty::I1.vec(8));
    let x = reg(&mut b, Ty::Float.vec(16));
    b.select(&c, &x, &x);
}

#[test]
#[should_panic(expected = "`sext` from <8 x i32> %t1 to <16 x i64> is ill-typed")]
fn lane_count_changing_cast_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::I32.vec(8));
    b.sext(&x, Ty::I64.vec(16));
}

#[test]
#[should_panic(expected = "`bitcast` from <8 x i32> %t1 to <8 x i16> is ill-typed")]
fn bitcast_changing_width_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::I32.vec(8));
    b.bitcast(&x, Ty::I16.vec(8));
}

#[test]
#[should_panic(expected = "`insertelement` of i64 %t2 into <8 x i32> %t1")]
fn insertelement_of_the_wrong_lane_type_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::I32.vec(8));
    let s = reg(&mut b, Ty::I64);
    b.insertelement(&x, &s, &V::int(Ty::I32, 0));
}

#[test]
#[should_panic(expected = "shuffle mask <8 x i32> %t2")]
fn shuffle_by_a_variable_mask_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::I32.vec(8));
    let m = reg(&mut b, Ty::I32.vec(8));
    b.shufflevector(&x, &x, &m);
}

#[test]
#[should_panic(
    expected = "argument 2 of @llvm.masked.load.v16f32.p0v16f32 is <8 x i1> %t1, not <16 x i1>"
)]
fn masked_load_with_a_mask_of_other_lanes_panics() {
    let mut b = Builder::default();
    let m = reg(&mut b, Ty::I1.vec(8));
    let v = Ty::Float.vec(16);
    b.masked_load(&V::new(v.ptr(), "%p"), 4, &m, &V::zeroinit(v));
}

#[test]
#[should_panic(
    expected = "argument 2 of @llvm.masked.store.v8i32.p0v8i32 must be a constant, not %al"
)]
fn immarg_given_a_variable_panics() {
    let mut b = Builder::default();
    let v = Ty::I32.vec(8);
    let (x, m) = (reg(&mut b, v), reg(&mut b, Ty::I1.vec(8)));
    let al = V::new(Ty::I32, "%al");
    b.call_void(
        &Decl::masked_store(v),
        &[&x, &V::new(v.ptr(), "%p"), &al, &m],
    );
}

#[test]
#[should_panic(expected = "`br` condition i64 %t1")]
fn cond_br_on_a_non_i1_panics() {
    let mut b = Builder::default();
    let c = reg(&mut b, Ty::I64);
    let (t, f) = (b.new_block("t"), b.new_block("f"));
    b.cond_br(&c, &t, &f);
}

#[test]
#[should_panic(expected = "phi arm i32 %t2 in a i64 phi")]
fn phi_with_a_mismatched_arm_panics() {
    let mut b = Builder::default();
    let (x, y) = (reg(&mut b, Ty::I64), reg(&mut b, Ty::I32));
    let (l, r) = (b.new_block("l"), b.new_block("r"));
    b.phi(&[(x, l), (y, r)]);
}

#[test]
#[should_panic(expected = "phi arm float %t2 in a i64 phi")]
fn closing_a_phi_with_a_mismatched_arm_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::I64);
    let y = reg(&mut b, Ty::Float);
    let h = b.new_block("h");
    b.switch_to(&h);
    let p = b.phi_open(&[(x, h.clone())]);
    b.phi_close(p, &[(y, h)]);
}

#[test]
#[should_panic(expected = "a phi not at the head of block `h`")]
fn phi_after_an_instruction_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::I64);
    let h = b.new_block("h");
    b.switch_to(&h);
    b.add(&x, &x);
    b.phi(&[(x, h)]);
}

#[test]
#[should_panic(expected = "an instruction after the terminator of block `h`")]
fn instruction_after_a_terminator_panics() {
    let mut b = Builder::default();
    let x = reg(&mut b, Ty::I64);
    let h = b.new_block("h");
    b.switch_to(&h);
    b.ret_void();
    b.add(&x, &x);
}

#[test]
#[should_panic(expected = "block `entry` falls through to `next`")]
fn falling_through_panics() {
    let mut b = Builder::default();
    let (entry, next) = (b.entry(), b.new_block("next"));
    b.switch_to(&entry);
    b.switch_to(&next);
}

#[test]
#[should_panic(expected = "a branch or phi names block `nowhere`, never placed")]
fn branch_to_a_block_never_placed_panics() {
    let mut b = Builder::default();
    let (entry, nowhere) = (b.entry(), b.new_block("nowhere"));
    b.switch_to(&entry);
    b.br(&nowhere);
    b.define_void("f", "");
}

#[test]
#[should_panic(expected = "1 phi(s) left open")]
fn a_phi_left_open_panics() {
    let mut b = Builder::default();
    let (entry, h) = (b.entry(), b.new_block("h"));
    b.switch_to(&entry);
    b.br(&h);
    b.switch_to(&h);
    let _open = b.phi_open(&[(V::int(Ty::I64, 0), entry)]);
    b.ret_void();
    b.define_void("f", "");
}

#[test]
#[should_panic(expected = "`%x` defined twice")]
fn a_name_defined_twice_panics() {
    let mut b = Builder::default();
    let y = reg(&mut b, Ty::I64);
    b.named("x").add(&y, &y);
    b.named("x").add(&y, &y);
}

/// A body whose entry block its caller writes (codegen's kernels): the
/// blocks after it are checked whole.
#[test]
fn a_body_without_its_entry_block_is_checked_whole() {
    let mut b = Builder::default();
    let (first, next) = (b.new_block("b0"), b.new_block("b1"));
    b.switch_to(&first);
    b.br(&next);
    b.switch_to(&next);
    b.ret_void();
    b.check_body();
    assert_eq!(b.body, "b0:\n  br label %b1\nb1:\n  ret void\n");
}

#[test]
#[should_panic(expected = "names block `b1`, never placed")]
fn a_body_branching_to_an_unplaced_block_panics() {
    let mut b = Builder::default();
    let (first, next) = (b.new_block("b0"), b.new_block("b1"));
    b.switch_to(&first);
    b.br(&next);
    b.check_body();
}

#[test]
#[should_panic(expected = "falls through to `the end of the function`")]
fn a_body_left_open_panics() {
    let mut b = Builder::default();
    let first = b.new_block("b0");
    b.switch_to(&first);
    b.check_body();
}
