/* ai.kiln::Attention's hot path in portable 128-bit GNU C vectors (SSE2 on x86-64, NEON on
 * arm64): the baseline instance, compiled with the project's flags. */
#include <string.h>

#include "kernels/attention.h"
#include "kernels/vmath.h"

#define AT_FN(name) name##_portable
#define AT_VW 4
#define AT_QB 4
#include "kernels/attention_tiles.h"
