/* image.c -- PNG and JPEG decoding to 8-bit RGB, PNG encoding (see image.h). libpng's
 * simplified API reads every PNG flavour; libjpeg reports errors through a longjmp. */
#include "trainer/data/image.h"

#include <errno.h>
#include <stdio.h> // FILE, which jpeglib.h needs declared first
#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>

#include "kernels/base.h" // CHECK, xmalloc

void image_init(Image *im, int w, int h) {
    CHECK(w > 0 && h > 0, "image_init(%d, %d)", w, h);
    im->w = w;
    im->h = h;
    im->rgb = xmalloc((size_t)w * h * 3);
}

void image_free(Image *im) {
    free(im->rgb);
    memset(im, 0, sizeof *im);
}

// ---- PNG ----
static int load_png(Image *im, const char *path, char *err, size_t errlen) {
    png_image png;
    memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_file(&png, path)) {
        snprintf(err, errlen, "%s: bad PNG: %s", path, png.message);
        return -1;
    }
    png.format = PNG_FORMAT_RGB;
    image_init(im, (int)png.width, (int)png.height);
    png_color black = {0, 0, 0};
    if (!png_image_finish_read(&png, &black, im->rgb, 0, NULL)) {
        snprintf(err, errlen, "%s: bad PNG: %s", path, png.message);
        png_image_free(&png);
        image_free(im);
        return -1;
    }
    return 0;
}

int image_save_png(const Image *im, const char *path, int level, char *err, size_t errlen) {
    CHECK(im->rgb && level >= 0 && level <= 9, "image_save_png: level %d", level);
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    CHECK(png && info, "libpng: out of memory");
    if (setjmp(png_jmpbuf(png))) {
        snprintf(err, errlen, "%s: cannot write PNG", path);
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return -1;
    }
    png_init_io(png, f);
    png_set_compression_level(png, level);
    png_set_IHDR(png, info, (png_uint_32)im->w, (png_uint_32)im->h, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < im->h; y++) png_write_row(png, im->rgb + (size_t)y * im->w * 3);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

// ---- JPEG ----
typedef struct JpegError {
    struct jpeg_error_mgr mgr;
    jmp_buf jump;
} JpegError;

static void jpeg_error_exit(j_common_ptr cinfo) {
    longjmp(((JpegError *)cinfo->err)->jump, 1);
}

static int load_jpeg(Image *im, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct jpeg_decompress_struct cinfo;
    JpegError jerr;
    cinfo.err = jpeg_std_error(&jerr.mgr);
    jerr.mgr.error_exit = jpeg_error_exit;
    if (setjmp(jerr.jump)) {
        char msg[JMSG_LENGTH_MAX];
        jerr.mgr.format_message((j_common_ptr)&cinfo, msg);
        snprintf(err, errlen, "%s: bad JPEG: %s", path, msg);
        jpeg_destroy_decompress(&cinfo);
        fclose(f);
        image_free(im);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_stdio_src(&cinfo, f);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        snprintf(err, errlen, "%s: CMYK JPEG: expected RGB or grey", path);
        jpeg_destroy_decompress(&cinfo);
        fclose(f);
        return -1;
    }
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    CHECK(cinfo.output_components == 3, "libjpeg gave %d components", cinfo.output_components);
    image_init(im, (int)cinfo.output_width, (int)cinfo.output_height);
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = im->rgb + (size_t)cinfo.output_scanline * im->w * 3;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    fclose(f);
    return 0;
}

int image_load(Image *im, const char *path, char *err, size_t errlen) {
    memset(im, 0, sizeof *im);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    unsigned char magic[8] = {0};
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (got == 8 && memcmp(magic, png_magic, 8) == 0) return load_png(im, path, err, errlen);
    if (got >= 3 && magic[0] == 0xff && magic[1] == 0xd8 && magic[2] == 0xff)
        return load_jpeg(im, path, err, errlen);
    snprintf(err, errlen, "%s: not a PNG or JPEG image", path);
    return -1;
}
