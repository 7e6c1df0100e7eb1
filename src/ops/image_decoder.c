/* ImageDecoder (opset 20): decode an encoded image (a 1-D uint8 tensor) into (H, W, 3) RGB or
 * BGR, or (H, W, 1) grayscale, as the ONNX reference does through Pillow.
 *
 * kiln decodes the two formats it can read without a codec library: BMP (uncompressed 24- and
 * 32-bit, bottom-up or top-down) and binary PNM (P5 grayscale, P6 colour, maxval up to 255).
 * PNG, JPEG, JPEG 2000, TIFF and WebP need libpng, libjpeg, OpenJPEG, libtiff and libwebp,
 * which kiln does not link; they are refused with the format's name. Grayscale from colour is
 * Pillow's convert("L"): (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16. */
#include <stdio.h>
#include <string.h>

#include "ops/op.h"

typedef struct image {
  int64_t h, w;
  int channels; /* 1 or 3 in `px` */
  const uint8_t *px;          /* PNM: the raster */
  const uint8_t *bmp;         /* BMP: the pixel array; rows of `stride` bytes */
  int64_t stride, bpp;        /* BMP bytes per pixel: 3 or 4 (BGR[A]) */
  bool bottom_up;
} image;

static uint32_t le32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static const char *parse_bmp(const uint8_t *b, int64_t n, image *im) {
  if (n < 54) return "a BMP shorter than its headers";
  uint32_t off = le32(b + 10), hsize = le32(b + 14);
  if (hsize < 40) return "a BMP with an OS/2 header";
  int32_t w = (int32_t)le32(b + 18), h = (int32_t)le32(b + 22);
  uint16_t bits = le16(b + 28);
  uint32_t comp = le32(b + 30);
  if ((bits != 24 && bits != 32) || comp != 0)
    return "a BMP that is not uncompressed 24- or 32-bit (palettes, RLE and bit fields are not supported)";
  if (w <= 0 || h == 0 || h == INT32_MIN) return "a BMP with no pixels";
  im->w = w;
  im->bottom_up = h > 0;
  im->h = h > 0 ? h : -(int64_t)h;
  im->bpp = bits / 8;
  im->stride = (im->w * im->bpp + 3) / 4 * 4;
  if ((int64_t)off > n || (n - (int64_t)off) / im->stride < im->h) return "a BMP whose pixel array is cut short";
  im->bmp = b + off;
  im->channels = 3;
  return NULL;
}

/* The next PNM header number at *p (whitespace and # comments skipped), or -1. */
static int64_t pnm_number(const uint8_t *b, int64_t n, int64_t *p) {
  while (*p < n && (b[*p] == ' ' || b[*p] == '\t' || b[*p] == '\n' || b[*p] == '\r' || b[*p] == '#')) {
    if (b[*p] == '#')
      while (*p < n && b[*p] != '\n') (*p)++;
    else
      (*p)++;
  }
  int64_t v = -1;
  while (*p < n && b[*p] >= '0' && b[*p] <= '9' && v < (1 << 24)) v = (v < 0 ? 0 : v * 10) + (b[(*p)++] - '0');
  return v;
}

static const char *parse_pnm(const uint8_t *b, int64_t n, image *im) {
  int64_t p = 2;
  im->channels = b[1] == '6' ? 3 : 1;
  im->w = pnm_number(b, n, &p);
  im->h = pnm_number(b, n, &p);
  int64_t maxval = pnm_number(b, n, &p);
  if (im->w <= 0 || im->h <= 0 || maxval <= 0 || p >= n) return "a PNM with a bad header";
  if (maxval > 255) return "a 16-bit PNM";
  p++; /* one whitespace byte ends the header */
  if ((n - p) / im->channels / im->w < im->h) return "a PNM whose raster is cut short";
  if (maxval != 255) return "a PNM with maxval other than 255";
  im->px = b + p;
  return NULL;
}

/* Pixel (y, x) as RGB. */
static void rgb_at(const image *im, int64_t y, int64_t x, uint8_t *rgb) {
  if (im->bmp) {
    const uint8_t *q = im->bmp + (im->bottom_up ? im->h - 1 - y : y) * im->stride + x * im->bpp;
    rgb[0] = q[2], rgb[1] = q[1], rgb[2] = q[0];
  } else if (im->channels == 3) {
    memcpy(rgb, im->px + (y * im->w + x) * 3, 3);
  } else {
    rgb[0] = rgb[1] = rgb[2] = im->px[y * im->w + x];
  }
}

static const char *format_name(const uint8_t *b, int64_t n) {
  if (n >= 8 && !memcmp(b, "\x89PNG", 4)) return "PNG";
  if (n >= 3 && b[0] == 0xff && b[1] == 0xd8) return "JPEG";
  if (n >= 12 && (!memcmp(b + 4, "jP  ", 4) || !memcmp(b, "\xff\x4f\xff\x51", 4))) return "JPEG 2000";
  if (n >= 4 && (!memcmp(b, "II*", 4) || !memcmp(b, "MM\0*", 4))) return "TIFF";
  if (n >= 12 && !memcmp(b, "RIFF", 4) && !memcmp(b + 8, "WEBP", 4)) return "WebP";
  return NULL;
}

static kiln_code decode_run(kiln_kctx *c) {
  kiln_code rc = kiln_need_tensors(c, 1);
  if (rc) return rc;
  const kiln_tensor *x = kiln_in(c, 0);
  if (x->dtype != KILN_UINT8 || x->rank != 1) return kiln_kfail(c, "input must be a 1-D uint8 tensor (the encoded image)");
  const char *fmt = kiln_attr_str(c->node, "pixel_format", "RGB");
  const int mode = !strcmp(fmt, "RGB") ? 0 : !strcmp(fmt, "BGR") ? 1 : !strcmp(fmt, "Grayscale") ? 2 : -1;
  if (mode < 0) return kiln_kfail(c, "pixel_format '%s' is not RGB, BGR or Grayscale", fmt);
  const uint8_t *b = x->data;
  const int64_t n = x->numel;
  image im = {0};
  const char *bad = NULL;
  if (n >= 2 && b[0] == 'B' && b[1] == 'M') bad = parse_bmp(b, n, &im);
  else if (n >= 3 && b[0] == 'P' && (b[1] == '5' || b[1] == '6')) bad = parse_pnm(b, n, &im);
  else if (format_name(b, n))
    return kiln_kunsup(c, "%s images need a codec library kiln does not link (kiln decodes BMP and PNM itself)", format_name(b, n));
  else
    return kiln_kfail(c, "the input is not an image format kiln knows (%lld bytes)", (long long)n);
  if (bad) return kiln_kunsup(c, "%s", bad);
  const int64_t dims[3] = {im.h, im.w, mode == 2 ? 1 : 3};
  kiln_tensor *y = kiln_out(c, 0, KILN_UINT8, 3, dims);
  if (!y) return c->err->code ? c->err->code : KILN_ERR_NOMEM;
  uint8_t *o = y->data;
  for (int64_t r = 0; r < im.h; r++)
    for (int64_t q = 0; q < im.w; q++) {
      uint8_t rgb[3];
      rgb_at(&im, r, q, rgb);
      if (mode == 2)
        *o++ = im.channels == 1 && !im.bmp ? rgb[0]
                                           : (uint8_t)((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
      else if (mode == 1)
        *o++ = rgb[2], *o++ = rgb[1], *o++ = rgb[0];
      else
        *o++ = rgb[0], *o++ = rgb[1], *o++ = rgb[2];
    }
  return KILN_OK;
}

static kiln_code decode_infer(kiln_ictx *c) {
  const char *fmt = kiln_attr_str(c->node, "pixel_format", "RGB");
  const int64_t dims[3] = {-1, -1, !strcmp(fmt, "Grayscale") ? 1 : 3};
  kiln_infer_tensor(c, 0, KILN_UINT8, 3, dims);
  return KILN_OK;
}

const kiln_op_schema kiln_ops_image_decoder[] = {
    {.domain = "", .name = "ImageDecoder", .since = 20, .inputs = {1, 1}, .outputs = {1, 1},
     .infer = decode_infer, .run = decode_run},
    {0},
};
