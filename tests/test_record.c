/*
 * test_record.c - the examples' run record writer (examples/run_record.c), compiled into
 * this program: a monitor on tests/fake_nvml.c (scripted values, see that file) is written
 * into a record and read back with cJSON, point by point: the series in the record's time
 * base, the fake's i-th values, null where NVML gave nothing (no power), the summary by the
 * library's key names. Writing is atomic (an old file is replaced whole, nothing is left
 * beside it; a write that cannot happen leaves no file), the early path check refuses what
 * cannot be written, and the records pass scripts/check_record.py where python3 exists.
 */
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "run_record.h"

static void sleep_ms(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

static const char *fake_nvml_path(void) {
    static char path[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0) return NULL;
    path[n] = '\0';
    char *slash = strrchr(path, '/');
    if (!slash) return NULL;
    strcpy(slash + 1, "libfake_nvml.so");
    return access(path, R_OK) == 0 ? path : NULL;
}

static char g_dir[PATH_MAX]; /* a fresh directory per program run */

static const char *tmp_path(const char *name) {
    static char p[PATH_MAX + 64];
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "/tmp/dlt_test_record_XXXXXX");
        if (!mkdtemp(g_dir)) return NULL;
    }
    snprintf(p, sizeof p, "%s/%s", g_dir, name);
    return p;
}

/* The record at path, parsed (NULL if unreadable). */
static cJSON *read_record(const char *path) {
    size_t n = 0;
    unsigned char *text = th_read_file(path, &n);
    if (!text) return NULL;
    text[n] = '\0';
    cJSON *j = cJSON_Parse((const char *)text);
    free(text);
    return j;
}

static const cJSON *at(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* scripts/check_record.py's verdict on path: 1 valid, 0 invalid (its messages printed as
 * TAP comments), -1 without python3 or the source tree. */
static int schema_valid(const char *path) {
    const char *src = getenv("DLT_SOURCE_ROOT");
    if (!src || system("command -v python3 >/dev/null 2>&1") != 0) return -1;
    char cmd[3 * PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "python3 '%s/scripts/check_record.py' '%s' >'%s.check' 2>&1", src, path, path);
    int ok = system(cmd) == 0;
    char out[PATH_MAX + 16];
    snprintf(out, sizeof out, "%s.check", path);
    if (!ok) {
        size_t n = 0;
        unsigned char *text = th_read_file(out, &n);
        if (text) {
            text[n] = '\0';
            for (char *l = strtok((char *)text, "\n"); l; l = strtok(NULL, "\n")) printf("# %s\n", l);
            free(text);
        }
    }
    unlink(out);
    return ok;
}

/* A record of device 0 (a CUDA device: without one, an "error" entry) sampled by the fake
 * NVML; the monitor is returned stopped. */
static cJSON *record_with_fake_monitor(const char *file, int no_power, dlt_gpu_monitor **mon_out) {
    const char *fake = fake_nvml_path();
    if (!fake) return NULL;
    setenv("DLT_NVML_LIBRARY", fake, 1);
    if (no_power) setenv("FAKE_NVML_NO_POWER", "1", 1);
    setenv("FAKE_NVML_REASONS", "thermal", 1);
    char *argv[] = {"test_record", "--json", (char *)file};
    run_record *rec = run_record_begin("test_record", 3, argv);
    REQUIRE(rec);
    sleep_ms(3); /* the monitor starts after the record: t_start_s > 0 */
    dlt_gpu_monitor *m = NULL;
    CHECK_OK(dlt_gpu_monitor_start(0, 2, &m));
    for (int i = 0; i < 2000; i++) {
        int64_t s = 0;
        CHECK_OK(dlt_gpu_monitor_int(m, DLT_GPUMON_SAMPLES, &s));
        if (s >= 6) break;
        sleep_ms(2);
    }
    CHECK_OK(dlt_gpu_monitor_stop(m));
    cJSON *dev = run_record_add_device(rec, DLT_DEVICE_CUDA, 0);
    REQUIRE(dev);
    run_record_device_monitor(rec, dev, m);
    cJSON *res = run_record_results(rec, "device_report");
    rr_int(res, "gpus", 1);
    rr_str(res, "note", NULL);
    REQUIRE(run_record_write(rec, file, "test_record") == 0);
    run_record_free(rec);
    unsetenv("DLT_NVML_LIBRARY");
    unsetenv("FAKE_NVML_NO_POWER");
    unsetenv("FAKE_NVML_REASONS");
    *mon_out = m;
    return read_record(file);
}

static void test_monitor_series_in_record(void) {
    const char *file = tmp_path("fake.json");
    REQUIRE(file);
    if (!fake_nvml_path()) SKIP("libfake_nvml.so not built next to the test");
    dlt_gpu_monitor *m = NULL;
    cJSON *j = record_with_fake_monitor(file, 0, &m);
    REQUIRE(j, "record unreadable");
    const cJSON *mon = at(cJSON_GetArrayItem(at(j, "devices"), 0), "monitor");
    REQUIRE(cJSON_IsObject(mon));
    CHECK(cJSON_IsTrue(at(mon, "available")) && at(mon, "interval_ms")->valuedouble == 2);
    int64_t n = 0;
    CHECK_OK(dlt_gpu_monitor_int(m, DLT_GPUMON_SAMPLES, &n));
    const cJSON *sum = at(mon, "summary"), *ser = at(mon, "series");
    CHECK(at(sum, "samples")->valuedouble == (double)n && at(ser, "points")->valuedouble == (double)n,
          "samples %g, points %g, monitor %lld", at(sum, "samples")->valuedouble, at(ser, "points")->valuedouble,
          (long long)n);
    CHECK(at(sum, "sm_clock_max_mhz")->valuedouble == 1000.0 + 10.0 * (double)n);
    CHECK(at(sum, "thermal_throttle_samples")->valuedouble == 1);
    CHECK(at(sum, "start_monotonic_s") == NULL, "the monotonic start stays out of the record");
    /* the series in the record's time base: the monitor's own times shifted by t_start_s */
    double t_start = at(mon, "t_start_s")->valuedouble, dur = at(mon, "duration_s")->valuedouble;
    CHECK(t_start >= 0.003 && t_start < 5.0, "t_start_s %g", t_start);
    double *own = calloc((size_t)n * DLT_GPUMON_SERIES_NFIELDS + 1, sizeof *own);
    REQUIRE(own);
    int64_t got = 0;
    CHECK_OK(dlt_gpu_monitor_series(m, 0, n, DLT_GPUMON_SERIES_NFIELDS, own, &got));
    CHECK(got == n);
    const cJSON *t = at(ser, "t_s"), *util = at(ser, "gpu_util"), *clk = at(ser, "sm_clock_mhz"),
                *pw = at(ser, "power_w"), *temp = at(ser, "temp_c"), *rs = at(ser, "clock_event_reasons");
    int bad = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t i = k + 1; /* the fake's call number */
        double tk = cJSON_GetArrayItem(t, (int)k)->valuedouble;
        bad += fabs(tk - (own[k * DLT_GPUMON_SERIES_NFIELDS] + t_start)) > 2e-6;
        bad += tk < t_start || tk > t_start + dur + 1e-6;
        bad += cJSON_GetArrayItem(util, (int)k)->valuedouble != (double)((37 * i) % 101);
        bad += cJSON_GetArrayItem(clk, (int)k)->valuedouble != 1000.0 + 10.0 * (double)i;
        bad += fabs(cJSON_GetArrayItem(pw, (int)k)->valuedouble - (200.0 + 1.5 * (double)i)) > 1e-9;
        bad += cJSON_GetArrayItem(temp, (int)k)->valuedouble != 40.0 + (double)(i % 7);
        bad += cJSON_GetArrayItem(rs, (int)k)->valuedouble != (i == 3 ? 0x41 : 0x1);
    }
    CHECK(bad == 0, "%d mismatches in %lld points", bad, (long long)n);
    for (int32_t f = 0; f < DLT_GPUMON_SERIES_NFIELDS; f++)
        CHECK(cJSON_GetArraySize(at(ser, dlt_gpu_monitor_series_field_name(f))) == (int)n, "field %d", f);
    int v = schema_valid(file);
    CHECK(v != 0, "scripts/check_record.py refuses %s", file);
    printf("# %lld points; schema check: %s\n", (long long)n, v > 0 ? "valid" : "not run (no python3)");
    free(own);
    cJSON_Delete(j);
    dlt_gpu_monitor_destroy(m);
}

static void test_missing_power_is_null(void) {
    const char *file = tmp_path("nopower.json");
    REQUIRE(file);
    if (!fake_nvml_path()) SKIP("libfake_nvml.so not built next to the test");
    dlt_gpu_monitor *m = NULL;
    cJSON *j = record_with_fake_monitor(file, 1, &m);
    REQUIRE(j);
    const cJSON *mon = at(cJSON_GetArrayItem(at(j, "devices"), 0), "monitor");
    CHECK(cJSON_IsNull(at(at(mon, "summary"), "power_mean_w")), "no power: null, not 0");
    const cJSON *pw = at(at(mon, "series"), "power_w"), *p;
    int nonnull = 0, count = 0;
    cJSON_ArrayForEach(p, pw) {
        count++;
        nonnull += !cJSON_IsNull(p);
    }
    CHECK(count >= 6 && nonnull == 0, "%d of %d power values are not null", nonnull, count);
    CHECK(cJSON_IsNumber(cJSON_GetArrayItem(at(at(mon, "series"), "temp_c"), 0)));
    cJSON_Delete(j);
    dlt_gpu_monitor_destroy(m);
}

static void test_cpu_record_and_atomic_write(void) {
    const char *file = tmp_path("cpu.json");
    REQUIRE(file);
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s", file);
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs("an older record, longer than nothing at all", f);
    fclose(f);
    char *argv[] = {"test_record"};
    run_record *rec = run_record_begin("test_record", 1, argv);
    REQUIRE(rec);
    cJSON *dev = run_record_add_device(rec, DLT_DEVICE_CPU, 0);
    run_record_device_monitor(rec, dev, NULL);
    cJSON *res = run_record_results(rec, "device_report");
    rr_int(res, "gpus", 0);
    rr_str(res, "note", "a CPU record from test_record");
    rr_num(res, "not_a_number", NAN); /* non-finite values become null */
    CHECK(run_record_write(rec, path, "test_record") == 0);
    cJSON *j = read_record(path);
    REQUIRE(j, "the old file was not replaced by a whole record");
    CHECK(strcmp(at(j, "schema")->valuestring, RUN_RECORD_SCHEMA) == 0);
    CHECK(at(j, "schema_version")->valuedouble == RUN_RECORD_SCHEMA_VERSION);
    const cJSON *d0 = cJSON_GetArrayItem(at(j, "devices"), 0);
    CHECK(strcmp(at(d0, "kind")->valuestring, "cpu") == 0 && cJSON_IsNull(at(d0, "monitor")));
    CHECK(at(d0, "logical_cpus")->valuedouble == (double)sysconf(_SC_NPROCESSORS_ONLN));
    CHECK(cJSON_IsNull(at(at(j, "results"), "not_a_number")));
    CHECK(strcmp(at(at(j, "software"), "libdltrain")->valuestring, dlt_version_string()) == 0);
    CHECK(at(j, "duration_s")->valuedouble >= 0 && strlen(at(j, "started_utc")->valuestring) == 24);
    cJSON_Delete(j);
    CHECK(th_count_files(g_dir, "cpu.json.tmp.") == 0, "a temporary file was left");
    /* created as a plain open(2) would: 0666 less the umask (not mkstemp's 0600) */
    mode_t um = umask(0);
    umask(um);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0666 & ~um), "mode %o, umask %o",
          (unsigned)st.st_mode & 0777, (unsigned)um);
    int v = schema_valid(path);
    CHECK(v != 0, "scripts/check_record.py refuses %s", path);
    printf("# schema check: %s\n", v > 0 ? "valid" : "not run (no python3)");
    /* a place that cannot take the record: -1, nothing created */
    char bad[PATH_MAX + 64];
    snprintf(bad, sizeof bad, "%s/no/such/dir/r.json", g_dir);
    CHECK(run_record_write(rec, bad, "test_record") == -1);
    CHECK(run_record_check_path(bad, "test_record") == -1);
    CHECK(run_record_check_path(g_dir, "test_record") == -1, "a directory is refused");
    CHECK(run_record_check_path("", "test_record") == -1);
    CHECK(run_record_check_path(path, "test_record") == 0);
    snprintf(bad, sizeof bad, "%s/no", g_dir);
    CHECK(access(bad, F_OK) != 0, "a directory was created");
    run_record_free(rec);
}

int main(void) {
    RUN(test_monitor_series_in_record);
    RUN(test_missing_power_is_null);
    RUN(test_cpu_record_and_atomic_write);
    /* clean up the directory */
    const char *names[] = {"fake.json", "nopower.json", "cpu.json"};
    for (int i = 0; g_dir[0] && i < 3; i++) unlink(tmp_path(names[i]));
    if (g_dir[0]) rmdir(g_dir);
    return th_done();
}
