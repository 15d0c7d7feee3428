/* paramgroup.h -- a set of parameter names written as a few brace patterns, each exactly the
 * set of its members: the 36 names model.28.dec_bbox_head.<i>.layers.<j>.<weight|bias> become
 * "model.28.dec_bbox_head.{0..5}.layers.{0..2}.{weight,bias}". Names are split at '.'; two
 * patterns of the same length merge when they differ in one position only, and that position
 * holds numbers (module indices) or is the last one (the tensor's own name). Merging never adds
 * a name that is not in the set, so a pattern's count is the product of its sets' sizes.
 *
 * One grouping for the views and the diagnosis engine's texts (diagnose.h's group_param_names). */
#ifndef TUI_PARAMGROUP_H
#define TUI_PARAMGROUP_H

typedef struct ParamGroup {
    char *pattern; // "model.28.dec_bbox_head.{0..5}.layers.{0..2}.{weight,bias}"
    int n;         // members
    int *members;  // parameter indices, ascending
} ParamGroup;

// Groups the parameters idx[0..n) (indices into names) into patterns, largest group first
// (ties: the one whose first member comes first). Returns the number of groups and sets *out
// (NULL when n is 0); free with paramgroup_free.
int paramgroup_build(char *const *names, const int *idx, int n, ParamGroup **out);
void paramgroup_free(ParamGroup *groups, int n);

// Writes "{0..5}"-style text for a sorted list of integers: "3", "{0..5}", "{0..2,5,7..9}".
// Returns buf.
char *paramgroup_ints(const int *v, int n, char *buf, int cap);

#endif
