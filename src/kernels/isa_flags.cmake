# One dispatch rule: an ISA variant lives in a file of its own under src/kernels/, compiled
# with that ISA's flags here, and is entered only through plain-C code that checked
# kiln_cpu_isa() (src/kernels/cpu.c). Nothing else is built for more than baseline x86-64.
# scripts/check-isa.sh runs the tests on emulated CPUs without AVX-512 and without AVX2 to
# prove it.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|i.86")
  set(KILN_FLAGS_AVX2 -mavx2 -mfma -mf16c)
  set(KILN_FLAGS_AVX512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c)
  set(KILN_ISA_DIR ${CMAKE_SOURCE_DIR}/src/kernels)
  # the memory-bound kernels: the same loops per ISA, no contraction, so results match
  set_source_files_properties(${KILN_ISA_DIR}/vec_f32_scalar.c PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
  set_source_files_properties(${KILN_ISA_DIR}/vec_f32_avx2.c PROPERTIES COMPILE_OPTIONS
    "${KILN_FLAGS_AVX2};-ffp-contract=off")
  set_source_files_properties(${KILN_ISA_DIR}/vec_f32_avx512.c PROPERTIES COMPILE_OPTIONS
    "${KILN_FLAGS_AVX512};-ffp-contract=off")
  set_source_files_properties(${KILN_ISA_DIR}/attention_avx2.c PROPERTIES COMPILE_OPTIONS "${KILN_FLAGS_AVX2}")
  set_source_files_properties(${KILN_ISA_DIR}/attention_avx512.c PROPERTIES COMPILE_OPTIONS "${KILN_FLAGS_AVX512}")
  set_source_files_properties(${KILN_ISA_DIR}/pool_avx512.c PROPERTIES COMPILE_OPTIONS "${KILN_FLAGS_AVX512}")
endif()
