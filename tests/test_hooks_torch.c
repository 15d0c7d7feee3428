/* test_hooks_torch.c -- gradient-ready hook order of small graphs built with our ops, against
 * the order PyTorch's autograd engine fires AccumulateGrad hooks for the same graphs (the
 * hooks DDP's reducer listens to), and the parameters' gradients against PyTorch's.
 * Expected orders: tests/golden/hooks.txt; data: tests/golden/hooks.bin (make_golden.py writes
 * both; the graphs are described there and in tests/golden/README.md). Parameter i of a graph
 * is tensor_leaf "<graph>/p<i>" with param_index i. */
#include <errno.h>

#include "tests/expect.h"
#include "tests/golden.h"
#include "trainer/ops/ops.h"

#include "kernels/base.h"

#define MAX_PARAMS 16
#define ORDERS_PATH "tests/golden/hooks.txt"

// Gradients: float64 reference on float32 inputs; the graphs reduce over < 100 terms per
// value, so float32 rounding stays near n * 2^-24 relative.
static const double GRAD_ATOL = 1e-5, GRAD_RTOL = 5e-5;

static Golden G;

// ---- expected orders (hooks.txt: "name n_params : order... ; nohook...") ----
typedef struct Expected {
    char name[32];
    int n_params;
    int order[MAX_PARAMS], n_order;
    int nohook[MAX_PARAMS], n_nohook;
} Expected;

// Parses the list after a name into out[]; returns the count, or -1 on a malformed line.
static int parse_ints(char *s, int *out, int max) {
    int n = 0;
    for (char *tok = strtok(s, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
        char *endp;
        long v = strtol(tok, &endp, 10);
        if (*endp || n == max || v < 0 || v >= MAX_PARAMS) return -1;
        out[n++] = (int)v;
    }
    return n;
}

static int load_orders(Expected *e, int max) {
    FILE *f = fopen(ORDERS_PATH, "r");
    if (!f) {
        fprintf(stderr, "%s: cannot open: %s\n%s\n", ORDERS_PATH, strerror(errno), GOLDEN_HINT);
        return -1;
    }
    char line[512];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n') continue;
        char *colon = strchr(line, ':'), *semi = strchr(line, ';');
        bool ok = n < max && colon && semi && semi > colon;
        if (ok) {
            *colon = *semi = '\0';
            Expected *x = &e[n];
            ok = sscanf(line, "%31s %d", x->name, &x->n_params) == 2 && x->n_params > 0 &&
                 x->n_params <= MAX_PARAMS;
            x->n_order = ok ? parse_ints(colon + 1, x->order, MAX_PARAMS) : -1;
            x->n_nohook = ok ? parse_ints(semi + 1, x->nohook, MAX_PARAMS) : -1;
            ok = x->n_order >= 0 && x->n_nohook >= 0;
        }
        if (!ok) {
            fprintf(stderr, "%s:%d: malformed line\n%s\n", ORDERS_PATH, lineno, GOLDEN_HINT);
            fclose(f);
            return -1;
        }
        n++;
    }
    fclose(f);
    return n;
}

// ---- one graph ----
typedef struct Graph {
    const char *name;
    Arena arena;
    Tape tape;
    Tensor *p[MAX_PARAMS];
    Tensor *x; // "<name>/x" when stored: a leaf when PyTorch stored its gradient "dx"
    int fired[4 * MAX_PARAMS], n_fired;
} Graph;

static int on_ready(void *user, Tensor *leaf) {
    Graph *g = user;
    EXPECT(leaf->grad_defined, "%s: hook of param %d before its grad was defined", g->name,
           leaf->param_index);
    if (leaf->param_index < 0) return 0; // the input x: PyTorch registered no hook on it
    CHECK(g->n_fired < 4 * MAX_PARAMS, "too many hooks");
    g->fired[g->n_fired++] = leaf->param_index;
    return 0;
}

static Tensor *constant(Graph *g, const char *field) {
    return golden_tensor(&g->arena, golden_get(&G, "%s/%s", g->name, field));
}

// ---- the graphs, built as make_golden.py builds them ----
// Ops are called one per statement where the creation order matters: C leaves the order in
// which function arguments are evaluated unspecified, and sequence numbers follow it.
static Tensor *linear_relu(Tape *t, Tensor *x, Tensor *w, Tensor *b) {
    return op_relu(t, op_linear(t, x, w, b));
}

// (a) Linear-ReLU-Linear.
static Tensor *build_mlp(Graph *g) {
    Tape *t = &g->tape;
    return op_linear(t, linear_relu(t, g->x, g->p[0], g->p[1]), g->p[2], g->p[3]);
}

// (b) a trunk feeding two heads whose outputs are added.
static Tensor *build_fanout(Graph *g) {
    Tape *t = &g->tape;
    Tensor *h = linear_relu(t, g->x, g->p[0], g->p[1]);
    Tensor *head1 = op_linear(t, h, g->p[2], g->p[3]);
    Tensor *head2 = op_linear(t, h, g->p[4], g->p[5]);
    return op_add(t, head1, head2);
}

// (c) p0 is the weight of the first and of the last Linear.
static Tensor *build_shared(Graph *g) {
    Tape *t = &g->tape;
    Tensor *h = linear_relu(t, linear_relu(t, g->x, g->p[0], g->p[1]), g->p[2], g->p[3]);
    return op_linear(t, h, g->p[0], g->p[4]);
}

// (d) lin2 reads lin0's output detached; lin3's output is detached before the add.
static Tensor *build_detached(Graph *g) {
    Tape *t = &g->tape;
    Tensor *h = op_linear(t, g->x, g->p[0], g->p[1]);
    Tensor *a = op_linear(t, h, g->p[2], g->p[3]);
    Tensor *b = op_linear(t, op_detach(t, h), g->p[4], g->p[5]);
    Tensor *y = op_add(t, a, b);
    Tensor *c = op_detach(t, op_linear(t, g->x, g->p[6], g->p[7]));
    return op_add(t, y, c);
}

// (e) head b is computed, but its loss term is the constant torch.tensor(0.).
static Tensor *build_zero_loss(Graph *g) {
    Tape *t = &g->tape;
    Tensor *h = linear_relu(t, g->x, g->p[0], g->p[1]);
    Tensor *loss_a = op_sum(t, op_linear(t, h, g->p[2], g->p[3]));
    op_linear(t, h, g->p[4], g->p[5]);
    return op_add(t, loss_a, tensor_scalar(t->arena, 0.0f));
}

static BatchNormState fresh_bn(Graph *g, int64_t C) {
    BatchNormState st = {.running_mean = tensor_zeros(&g->arena, 1, (int64_t[]){C}),
                         .running_var = tensor_new(&g->arena, 1, (int64_t[]){C}),
                         .momentum = 0.03f,
                         .eps = 1e-3f};
    for (int64_t i = 0; i < C; i++)
        st.running_var->data[i] = 1.0f;
    return st;
}

// (f) conv3x3 (no bias) -> BN -> SiLU -> conv1x1 (no bias) -> BN; loss = sum(out * r).
static Tensor *build_conv_bn(Graph *g) {
    Tape *t = &g->tape;
    BatchNormState bn1 = fresh_bn(g, 4), bn2 = fresh_bn(g, 4);
    Conv2dParams k3 = {1, 1, 1, 1, 1, 1, 1}, k1 = {1, 1, 0, 0, 1, 1, 1};
    Tensor *a = op_batchnorm2d(t, op_conv2d(t, g->x, g->p[0], NULL, k3), g->p[1], g->p[2], &bn1);
    a = op_silu(t, a);
    a = op_batchnorm2d(t, op_conv2d(t, a, g->p[3], NULL, k1), g->p[4], g->p[5], &bn2);
    return op_sum(t, op_mul(t, a, constant(g, "r")));
}

// (g) nn.MultiheadAttention (q = k = x + pos, v = x), residual, LayerNorm.
static Tensor *build_mha_ln(Graph *g) {
    Tape *t = &g->tape;
    Tensor *q = op_add(t, g->x, constant(g, "pos"));
    Tensor *a = op_mha_core(t, q, q, g->x, g->p[0], g->p[1], 2, NULL);
    a = op_linear(t, a, g->p[2], g->p[3]);
    return op_layernorm(t, op_add(t, g->x, a), g->p[4], g->p[5], 1e-5f);
}

// (i) AIFI-like: x + Linear(GELU(Linear(LayerNorm(x)))).
static Tensor *build_aifi(Graph *g) {
    Tape *t = &g->tape;
    Tensor *h = op_layernorm(t, g->x, g->p[0], g->p[1], 1e-5f);
    h = op_linear(t, op_gelu(t, op_linear(t, h, g->p[2], g->p[3])), g->p[4], g->p[5]);
    return op_add(t, g->x, h);
}

// (h) torch.cat of the leaf parameters themselves.
static Tensor *build_cat4(Graph *g) {
    return op_concat(&g->tape, g->p, 4, 0);
}
static Tensor *build_cat5(Graph *g) {
    return op_concat(&g->tape, g->p, 5, 0);
}

static const struct {
    const char *name;
    Tensor *(*build)(Graph *g);
} graphs[] = {
    {"mlp", build_mlp},           {"fanout", build_fanout},       {"shared", build_shared},
    {"detached", build_detached}, {"zero_loss", build_zero_loss}, {"conv_bn", build_conv_bn},
    {"mha_ln", build_mha_ln},     {"aifi", build_aifi},           {"cat4", build_cat4},
    {"cat5", build_cat5},
};

static void expect_grad(const char *what, const Tensor *x, const GoldenArray *want) {
    EXPECT(x->grad_defined, "%s: no gradient", what);
    if (x->grad_defined)
        EXPECT(golden_compare(what, x->grad, x->n, want, GRAD_ATOL, GRAD_RTOL) == 0,
               "%s differs from PyTorch", what);
}

static void run_graph(const Expected *e, Tensor *(*build)(Graph *g)) {
    Graph g = {.name = e->name};
    arena_init(&g.arena, DEV_CPU, 1 << 20);
    tape_init(&g.tape, &g.arena, 1);
    g.tape.on_grad_ready = on_ready;
    g.tape.hook_user = &g;
    for (int i = 0; i < e->n_params; i++) {
        g.p[i] = golden_leaf(&g.arena, golden_get(&G, "%s/p%d", e->name, i));
        g.p[i]->param_index = i;
    }
    EXPECT(!golden_find(&G, "%s/p%d", e->name, e->n_params), "%s: more params stored than %d",
           e->name, e->n_params);
    const GoldenArray *x = golden_find(&G, "%s/x", e->name);
    const GoldenArray *dx = golden_find(&G, "%.31s/dx", e->name);
    if (x) g.x = dx ? golden_leaf(&g.arena, x) : golden_tensor(&g.arena, x);

    Tensor *root = build(&g);
    const GoldenArray *dy = golden_find(&G, "%s/dy", e->name);
    CHECK(!dy || dy->n == root->n, "%s: dy has %lld values, the root %lld", e->name,
          (long long)dy->n, (long long)root->n);
    EXPECT(tape_backward(&g.tape, root, dy ? dy->data : NULL) == 0, "%s: backward failed", e->name);

    // The order, printed whole on a mismatch: that line is what a reader compares.
    bool same = g.n_fired == e->n_order;
    for (int i = 0; same && i < e->n_order; i++)
        same = g.fired[i] == e->order[i];
    char want[128] = "", got[128] = "";
    for (int i = 0; i < e->n_order; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), " %d", e->order[i]);
    for (int i = 0; i < g.n_fired; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), " %d", g.fired[i]);
    EXPECT(same, "%s: hook order%s, PyTorch%s", e->name, got, want);

    for (int i = 0; i < e->n_nohook; i++)
        EXPECT(!g.p[e->nohook[i]]->grad_defined, "%s: param %d got a gradient, PyTorch's is None",
               e->name, e->nohook[i]);
    for (int i = 0; i < e->n_params; i++) {
        const GoldenArray *want_g = golden_find(&G, "%.31s/g%d", e->name, i);
        if (!want_g) continue;
        char what[64];
        snprintf(what, sizeof what, "%.31s/g%d", e->name, i);
        expect_grad(what, g.p[i], want_g);
    }
    if (dx) {
        char what[64];
        snprintf(what, sizeof what, "%.31s/dx", e->name);
        expect_grad(what, g.x, dx);
    }
    tape_free(&g.tape);
    arena_free(&g.arena);
}

int main(void) {
    Expected e[32];
    int n = load_orders(e, 32);
    if (n < 0 || golden_load(&G, "tests/golden/hooks.bin") != 0) {
        EXPECT(0, "cannot load the hook goldens");
        return expect_report();
    }
    int n_graphs = (int)(sizeof graphs / sizeof graphs[0]);
    EXPECT(n == n_graphs, "%s lists %d graphs, this test builds %d", ORDERS_PATH, n, n_graphs);
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < n_graphs && strcmp(graphs[j].name, e[i].name) != 0)
            j++;
        EXPECT(j < n_graphs, "%s: graph '%s' has no builder here", ORDERS_PATH, e[i].name);
        if (j < n_graphs) run_graph(&e[i], graphs[j].build);
    }
    golden_free(&G);
    return expect_report();
}
