# One dispatch rule: an ISA variant lives in a file of its own under src/kernels/, compiled
# with that ISA's flags here, and is entered only through plain-C code that checked
# kiln_cpu_isa() (src/kernels/cpu.c). Nothing else is built for more than baseline x86-64.
# scripts/check-isa.sh runs the tests on emulated CPUs without AVX-512 and without AVX2 to
# prove it. The flags are appended, so options set on all kernel files before (KILN_FUZZ) stay.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|i.86")
  set(KILN_FLAGS_AVX2 -mavx2 -mfma -mf16c)
  set(KILN_FLAGS_AVX512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c)
  set(KILN_ISA_DIR ${CMAKE_SOURCE_DIR}/src/kernels)
  function(kiln_isa_flags file)
    set_property(SOURCE ${KILN_ISA_DIR}/${file} APPEND PROPERTY COMPILE_OPTIONS ${ARGN})
  endfunction()
  # the memory-bound kernels: the same loops per ISA, no contraction, so results match
  kiln_isa_flags(vec_f32_scalar.c -ffp-contract=off)
  kiln_isa_flags(vec_f32_avx2.c ${KILN_FLAGS_AVX2} -ffp-contract=off)
  kiln_isa_flags(vec_f32_avx512.c ${KILN_FLAGS_AVX512} -ffp-contract=off)
  kiln_isa_flags(attention_avx2.c ${KILN_FLAGS_AVX2})
  kiln_isa_flags(attention_avx512.c ${KILN_FLAGS_AVX512})
  kiln_isa_flags(pool_avx512.c ${KILN_FLAGS_AVX512})
  kiln_isa_flags(pool_avx2.c ${KILN_FLAGS_AVX2})
  kiln_isa_flags(conv_dw_avx2.c ${KILN_FLAGS_AVX2})
  kiln_isa_flags(conv_direct_avx2.c ${KILN_FLAGS_AVX2})
  kiln_isa_flags(winograd_avx2.c ${KILN_FLAGS_AVX2})
  kiln_isa_flags(igemm_avx2.c ${KILN_FLAGS_AVX2})
  kiln_isa_flags(igemm_avx512.c ${KILN_FLAGS_AVX512} -mavx512vnni)
  kiln_isa_flags(quant_u8_avx2.c ${KILN_FLAGS_AVX2})
  kiln_isa_flags(quant_u8_avx512.c ${KILN_FLAGS_AVX512})
endif()
