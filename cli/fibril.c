/* cli/fibril.c - placeholder */
int main(void) { return 0; }
