/* cli.h — subcommands of the deepinfer binary, one file each in src/cli/.
 * Each takes (argc, argv) with argv[0] the command name and returns the exit
 * status (0 ok, 1 runtime error, 2 usage error). */
#ifndef DI_CLI_H
#define DI_CLI_H

int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
/* Developer command used by the reference tests: runs a prompt, then decode
 * steps, and writes every position's logits as raw f32 to a file. */
int cmd_logits(int argc, char **argv);

#endif
