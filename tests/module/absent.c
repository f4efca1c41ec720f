/* The library the fake module depends on; deleted before the probe runs. */
int gp_fake_absent_dependency(void);
int gp_fake_absent_dependency(void) {
    return 1;
}
