/* A string -> int hash map (open addressing). Keys are copied. */
#ifndef KILN_BASE_STRMAP_H
#define KILN_BASE_STRMAP_H

#include <stddef.h>

typedef struct kiln_strmap kiln_strmap;

kiln_strmap *kiln_strmap_new(void);
void kiln_strmap_free(kiln_strmap *m);
/* Returns 0 on success, -1 on allocation failure. Overwrites an existing key. */
int kiln_strmap_put(kiln_strmap *m, const char *key, int value);
/* Returns the value or -1 when absent. */
int kiln_strmap_get(const kiln_strmap *m, const char *key);
size_t kiln_strmap_size(const kiln_strmap *m);

#endif
