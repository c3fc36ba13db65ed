/* tests/bench/bpf_jitlines.c - where a loaded BPF program's source lines
 * sit in its JIT image, for tests/bench/bpf_lines.sh: prints the image's
 * start ("ksym ADDR") and then one line per line-info record, "ADDR
 * INSN-OFFSET FILE:LINE | SOURCE" (the program's jited_line_info and
 * line_info from BPF_OBJ_GET_INFO_BY_FD, the strings from its BTF). A
 * perf sample whose address falls between two records' addresses ran the
 * first one's line. Usage: bpf_jitlines PROG-ID (root). */
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <errno.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: bpf_jitlines PROG-ID\n");
		return 2;
	}
	int fd = bpf_prog_get_fd_by_id((__u32)strtoul(argv[1], NULL, 10));
	if (fd < 0) {
		fprintf(stderr, "bpf_jitlines: program %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	struct bpf_prog_info info;
	memset(&info, 0, sizeof(info));
	__u32 len = sizeof(info);
	if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) {
		fprintf(stderr, "bpf_jitlines: program %s: no info: %s\n", argv[1], strerror(errno));
		return 1;
	}
	__u32 n_lines = info.nr_line_info, n_jited = info.nr_jited_line_info;
	__u32 line_rec = info.line_info_rec_size, jited_rec = info.jited_line_info_rec_size;
	__u32 n_ksyms = info.nr_jited_ksyms, btf_id = info.btf_id;
	if (!n_lines || !n_jited || !n_ksyms || !btf_id) {
		fprintf(stderr, "bpf_jitlines: program %s has no JIT line info (not JITed, or no BTF)\n",
			argv[1]);
		return 1;
	}
	void *lines = calloc(n_lines, line_rec);
	void *jited = calloc(n_jited, jited_rec);
	__u64 *ksyms = calloc(n_ksyms, sizeof(*ksyms));
	if (!lines || !jited || !ksyms) {
		fprintf(stderr, "bpf_jitlines: out of memory\n");
		return 1;
	}
	memset(&info, 0, sizeof(info));
	info.nr_line_info = n_lines;
	info.line_info_rec_size = line_rec;
	info.line_info = (__u64)(unsigned long)lines;
	info.nr_jited_line_info = n_jited;
	info.jited_line_info_rec_size = jited_rec;
	info.jited_line_info = (__u64)(unsigned long)jited;
	info.nr_jited_ksyms = n_ksyms;
	info.jited_ksyms = (__u64)(unsigned long)ksyms;
	len = sizeof(info);
	if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) {
		fprintf(stderr, "bpf_jitlines: program %s: no line info: %s\n", argv[1],
			strerror(errno));
		return 1;
	}
	struct btf *btf = btf__load_from_kernel_by_id(btf_id);
	if (!btf) {
		fprintf(stderr, "bpf_jitlines: program %s: BTF %u: %s\n", argv[1], btf_id,
			strerror(errno));
		return 1;
	}
	printf("ksym %llx\n", (unsigned long long)ksyms[0]);
	for (__u32 i = 0; i < n_lines && i < n_jited; i++) {
		const struct bpf_line_info *l = (const void *)((const char *)lines + (size_t)i * line_rec);
		__u64 addr;
		memcpy(&addr, (const char *)jited + (size_t)i * jited_rec, sizeof(addr));
		const char *file = btf__name_by_offset(btf, l->file_name_off);
		const char *src = btf__name_by_offset(btf, l->line_off);
		const char *base = file ? strrchr(file, '/') : NULL;
		printf("%llx %u %s:%u | %s\n", (unsigned long long)addr, l->insn_off,
		       base ? base + 1 : (file ? file : "?"), BPF_LINE_INFO_LINE_NUM(l->line_col),
		       src ? src : "");
	}
	btf__free(btf);
	free(lines);
	free(jited);
	free(ksyms);
	close(fd);
	return 0;
}
