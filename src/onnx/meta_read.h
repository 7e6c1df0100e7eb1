/* The ModelProto's own description (producer, doc strings, metadata_props) as kiln_meta. */
#ifndef KILN_ONNX_META_READ_H
#define KILN_ONNX_META_READ_H

#include "ir/meta.h"
#include "kiln/kiln.h"
#include "onnx/proto.h"

kiln_code kiln_meta_from_proto(const Onnx__ModelProto *mp, kiln_meta **out, kiln_error *err);

#endif
