/* The CSV reader: one line at a time from a file or stdin (works on a growing stream, e.g.
 * `tail -f`), bounded memory whatever the line length, and every bad line reported with its
 * line number and skipped. Fields are separated by commas; a field wrapped in double quotes
 * has them removed (no embedded commas). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "anomaly.h"

#define AM_MAX_REPORTS 50

struct am_csv {
  FILE *f;
  int own;
  const am_config *cfg;
  char *line;          /* the current line, NUL-terminated */
  size_t cap;
  long line_no;
  int ncols;           /* fields per line, from the header */
  int *chan_col;       /* model channel -> column */
  int label_col;       /* -1 without labels */
  double *values;
  char **fields;
  int pending_first;   /* the header line was data: return it first */
  int row_base;        /* line number of data row 0: 2 after a header, 1 without */
  long bad, reported;
};

/* Read one line into c->line. 1: a line (possibly too long: *too_long set, content dropped);
 * 0: end of input. */
static int read_line(am_csv *c, int *too_long) {
  size_t n = 0;
  int ch, any = 0;
  *too_long = 0;
  while ((ch = getc(c->f)) != EOF) {
    any = 1;
    if (ch == '\n') break;
    if (n + 1 >= AM_MAX_LINE) {
      *too_long = 1;
      continue; /* drain the rest of the line without storing it */
    }
    if (n + 1 >= c->cap) {
      c->cap = c->cap ? c->cap * 2 : 4096;
      c->line = realloc(c->line, c->cap);
    }
    c->line[n++] = (char)ch;
  }
  if (!any) return 0;
  if (!c->line) c->line = malloc(c->cap = 4096);
  if (n > 0 && c->line[n - 1] == '\r') n--;
  c->line[n] = '\0';
  c->line_no++;
  return 1;
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
  if (n >= 2 && s[0] == '"' && s[n - 1] == '"') {
    s[n - 1] = '\0';
    s++;
  }
  return s;
}

/* Split c->line in place; returns the number of fields (up to max, counting the rest). */
static int split(char *line, char **fields, int max) {
  int n = 0;
  char *p = line;
  for (;;) {
    char *comma = strchr(p, ',');
    if (comma) *comma = '\0';
    if (n < max) fields[n] = trim(p);
    n++;
    if (!comma) return n;
    p = comma + 1;
  }
}

static int parse_number(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || errno == ERANGE || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static void report(am_csv *c, const char *detail) {
  c->bad++;
  if (c->reported++ < AM_MAX_REPORTS) {
    fprintf(stderr, "kiln-anomaly: line %ld: %s; skipped\n", c->line_no, detail);
  } else if (c->reported == AM_MAX_REPORTS + 1) {
    fprintf(stderr, "kiln-anomaly: more bad lines: counted, no longer shown\n");
  }
}

static int find(char **fields, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(fields[i], name) == 0) return i;
  return -1;
}

static int all_numbers(char **fields, int n) {
  double v;
  for (int i = 1; i < n; i++)
    if (parse_number(fields[i], &v)) return 0;
  return n > 1;
}

/* Map the model's channels to columns by name; else by position when the count fits. */
static int map_header(am_csv *c, int n, const char *label_column, char *err) {
  const am_config *cfg = c->cfg;
  int missing = -1;
  c->label_col = label_column ? find(c->fields, n, label_column) : -1;
  for (int i = 0; i < cfg->channels; i++) {
    c->chan_col[i] = find(c->fields, n, cfg->names[i]);
    if (c->chan_col[i] < 1 && missing < 0) missing = i;
  }
  if (label_column && c->label_col < 0 && missing < 0) {
    snprintf(err, AM_ERR_LEN, "no label column \"%s\" in the header", label_column);
    return -1;
  }
  if (missing < 0) return 0;
  int want = 1 + cfg->channels + (label_column ? 1 : 0);
  if (n != want) {
    snprintf(err, AM_ERR_LEN,
             "line 1: the header has no column \"%s\" (the model's channel %d) and %d fields "
             "instead of %d, so channels cannot be taken by position either",
             cfg->names[missing], missing, n, want);
    return -1;
  }
  c->pending_first = all_numbers(c->fields, n);
  c->row_base = c->pending_first ? c->line_no : c->line_no + 1;
  fprintf(stderr, "kiln-anomaly: line 1: %s does not name the model's channel \"%s\"; taking "
          "the columns by position (timestamp, %d channels%s)\n",
          c->pending_first ? "no header: the first line" : "the header", cfg->names[missing],
          cfg->channels, label_column ? ", label last" : "");
  for (int i = 0; i < cfg->channels; i++) c->chan_col[i] = 1 + i;
  if (label_column) c->label_col = n - 1;
  return 0;
}

am_csv *am_csv_open(const char *path, const am_config *cfg, const char *label_column,
                    char *err) {
  am_csv *c = calloc(1, sizeof(*c));
  c->cfg = cfg;
  c->own = strcmp(path, "-") != 0;
  c->f = c->own ? fopen(path, "r") : stdin;
  if (!c->f) {
    snprintf(err, AM_ERR_LEN, "%s: %s", path, strerror(errno));
    free(c);
    return NULL;
  }
  c->chan_col = calloc((size_t)cfg->channels, sizeof(int));
  c->row_base = 2;
  c->values = calloc((size_t)cfg->channels, sizeof(double));
  int too_long = 0, got;
  while ((got = read_line(c, &too_long)) && !too_long && c->line[0] == '\0') {
  } /* leading empty lines carry nothing */
  if (!got || too_long) {
    snprintf(err, AM_ERR_LEN, "%s: %s", path, got ? "the header line is too long" : "empty input");
    am_csv_close(c);
    return NULL;
  }
  int n = 1;
  for (const char *p = c->line; *p; p++) n += *p == ',';
  c->ncols = n;
  c->row_base = c->line_no + 1;
  c->fields = calloc((size_t)n + 1, sizeof(char *));
  split(c->line, c->fields, n + 1);
  if (map_header(c, n, label_column, err)) {
    am_csv_close(c);
    return NULL;
  }
  return c;
}

/* Parse the fields of the current line; 0 when good, else the line was reported. */
static int parse_row(am_csv *c, am_csv_row *row) {
  int n = split(c->line, c->fields, c->ncols + 1);
  if (n != c->ncols) {
    char detail[64];
    snprintf(detail, sizeof(detail), "%d fields, the header has %d", n, c->ncols);
    report(c, detail);
    return -1;
  }
  for (int i = 0; i < c->cfg->channels; i++) {
    const char *f = c->fields[c->chan_col[i]];
    if (parse_number(f, &c->values[i])) {
      char detail[160];
      snprintf(detail, sizeof(detail), "channel %s: \"%.64s\" is not a finite number",
               c->cfg->names[i], f);
      report(c, detail);
      return -1;
    }
  }
  row->label = -1;
  if (c->label_col >= 0) {
    double v;
    const char *f = c->fields[c->label_col];
    if (parse_number(f, &v) || (v != 0 && v != 1)) {
      char detail[128];
      snprintf(detail, sizeof(detail), "label \"%.64s\" is not 0 or 1", f);
      report(c, detail);
      return -1;
    }
    row->label = (int)v;
  }
  row->ts = c->fields[0];
  row->values = c->values;
  row->line = c->line_no;
  row->file_row = c->line_no - c->row_base;
  return 0;
}

int am_csv_next(am_csv *c, am_csv_row *row) {
  if (c->pending_first) { /* headerless input: the first line is a row */
    c->pending_first = 0;
    for (int i = 0; i < c->cfg->channels; i++) parse_number(c->fields[c->chan_col[i]], &c->values[i]);
    row->label = c->label_col >= 0 ? atoi(c->fields[c->label_col]) != 0 : -1;
    row->ts = c->fields[0];
    row->values = c->values;
    row->line = c->line_no;
    row->file_row = 0;
    return 1;
  }
  int too_long;
  while (read_line(c, &too_long)) {
    if (too_long) {
      char detail[64];
      snprintf(detail, sizeof(detail), "longer than %d bytes", AM_MAX_LINE);
      report(c, detail);
    } else if (c->line[0] == '\0') {
      report(c, "empty line");
    } else if (parse_row(c, row) == 0) {
      return 1;
    }
  }
  return 0;
}

long am_csv_bad_lines(const am_csv *c) { return c->bad; }

void am_csv_close(am_csv *c) {
  if (!c) return;
  if (c->own && c->f) fclose(c->f);
  free(c->line);
  free(c->chan_col);
  free(c->values);
  free(c->fields);
  free(c);
}
