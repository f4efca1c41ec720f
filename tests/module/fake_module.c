/* A stand-in libgpupipe-cuda.so whose dependency is missing at run time, as a CUDA module is on a
   machine without the CUDA libraries: dlopen must fail and AUTO must fall back and say why. */
int gp_fake_absent_dependency(void);
int gp_fake_module_marker(void);
int gp_fake_module_marker(void) {
    return gp_fake_absent_dependency();
}
