/* image.h -- 8-bit RGB images (HWC, row-major, 3 bytes a pixel): decode PNG (libpng) and JPEG
 * (libjpeg), encode PNG, and the bilinear resize Ultralytics' RT-DETR uses to stretch every
 * image to imgsz x imgsz (cv2.INTER_LINEAR semantics, resize.c). Not a general imaging
 * library: no alpha output, no EXIF orientation, no colour management.
 * Errors are one line "<path>: <what was wrong>" in err (the CLI prints it, exit 2). */
#ifndef TRAINER_DATA_IMAGE_H
#define TRAINER_DATA_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct Image {
    int w, h;
    uint8_t *rgb; // h * w * 3 bytes: pixel (x, y) channel c at rgb[(y * w + x) * 3 + c]
} Image;

// A w x h image, uninitialised pixels. image_free releases it (a zeroed Image is a no-op).
void image_init(Image *im, int w, int h);
void image_free(Image *im);

// Decodes the PNG or JPEG file at path (told apart by their signatures, not by the name).
// Grey, palette and 16-bit PNGs become 8-bit RGB; an alpha channel is composited onto black
// (cv2.imread drops it instead: only transparent pixels differ). Grey JPEGs become RGB;
// CMYK JPEGs are an error. Returns 0, or -1 with the message in err (im left zeroed).
int image_load(Image *im, const char *path, char *err, size_t errlen);

// Writes im as an 8-bit RGB PNG at zlib level `level` (0-9; 1 is fast, 6 is libpng's
// default). Returns 0, or -1 with the message in err.
int image_save_png(const Image *im, const char *path, int level, char *err, size_t errlen);

// dst = src resized to dw x dh with cv2.resize(..., interpolation=cv2.INTER_LINEAR) rules:
// pixel centres map as sx = (dx + 0.5) * src_w / dw - 0.5, a coordinate left of the first
// pixel (or right of the last) clamps to it with weight 1, and the two weights of each axis
// are fixed-point with 11 fractional bits, rounded as OpenCV's scalar path does (its SIMD
// path can differ by 1 in a few pixels; its exact-2x-downscale INTER_AREA shortcut is not
// reproduced). dst is allocated here (image_free it).
void image_resize(const Image *src, int dw, int dh, Image *dst);

#endif
