/* readall.h -- a whole input file into memory, for the post-mortem readers (a log for explain,
 * a Flight Recorder dump for import-fr): one read, a size limit, one line of error. */
#ifndef TUI_POSTMORTEM_READALL_H
#define TUI_POSTMORTEM_READALL_H

#include <stddef.h>
#include <stdint.h>

// Reads path ("-": standard input) into *data (malloc'd, NUL-terminated one byte past *len).
// 0, or -1 with one line in err naming the path: it cannot be opened or read, is a directory,
// or holds more than max bytes.
int read_all(const char *path, size_t max, uint8_t **data, size_t *len, char *err, size_t errlen);

#endif
