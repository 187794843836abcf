/* scripts/bench floor: the cheapest static program to exec. */
int main(void) { return 0; }
