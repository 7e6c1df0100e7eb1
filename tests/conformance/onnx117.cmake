# ONNX 1.17's conformance data (Debian 13's libonnx-testdata 1.17.0, fetched by
# scripts/install-deps.sh --test): the node, pytorch-converted, pytorch-operator and simple
# suites at optimisation levels 0 and 2 (label conformance: the sanitizer build runs level 0
# too), and the `light` models (label onnx117-light, release build only: nine ImageNet
# architectures, about 20 s). A missing folder fails the test with the command to fetch it.
set(KILN_ONNX117_DATA /var/cache/kiln/onnx-testdata/1.17.0/data CACHE PATH
    "ONNX 1.17 conformance data (scripts/install-deps.sh --test)")
set(_known117 ${CMAKE_CURRENT_SOURCE_DIR}/conformance/known_failures_1.17.txt)
add_test(NAME conformance_onnx117
         COMMAND kiln_conformance --data ${KILN_ONNX117_DATA} --expected ${_known117})
set_tests_properties(conformance_onnx117 PROPERTIES LABELS conformance TIMEOUT 1500)
add_test(NAME conformance_onnx117_level2
         COMMAND kiln_conformance --data ${KILN_ONNX117_DATA} --level 2 --expected ${_known117})
set_tests_properties(conformance_onnx117_level2 PROPERTIES LABELS onnx117-opt TIMEOUT 1500)
add_test(NAME conformance_onnx117_light
         COMMAND kiln_conformance --data ${KILN_ONNX117_DATA} --suites light --level 2
                 --expected ${CMAKE_CURRENT_SOURCE_DIR}/conformance/known_failures_light.txt)
set_tests_properties(conformance_onnx117_light PROPERTIES LABELS onnx117-light TIMEOUT 900)
