/* explain.h -- placeholder */
int explain_command(int argc, char **argv);
