// Rasteriser, font and figures of the Swin UNETR training example.
#include "train_png.h"

#if VOXAUG_TRAIN_LIBPNG
#include <png.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace voxaug::train {
namespace {

// 5x7 glyphs, one byte per row, bit 4 = leftmost column.
struct Glyph {
  char c;
  uint8_t rows[7];
};
constexpr Glyph kFont[] = {
    {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
    {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
    {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
    {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
    {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
    {'A', {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
    {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
    {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
    {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
    {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
    {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
    {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
    {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
    {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
    {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
    {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
    {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
    {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
    {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}}, {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
    {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}}, {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}},
    {'=', {0x00, 0x00, 0x1F, 0x00, 0x1F, 0x00, 0x00}}, {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
    {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
    {'+', {0x00, 0x04, 0x04, 0x1F, 0x04, 0x04, 0x00}}, {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
    {'%', {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03}},
};

const uint8_t* glyph(char c) {
  if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  for (const auto& g : kFont)
    if (g.c == c) return g.rows;
  return nullptr;  // space and unknown characters draw nothing
}

// Distinct colours for label classes 1.. (class 0 is not drawn).
Rgb class_color(int c) {
  static const Rgb table[] = {{230, 25, 75},  {60, 180, 75},   {255, 225, 25}, {0, 130, 200},
                              {245, 130, 48}, {145, 30, 180},  {70, 240, 240}, {240, 50, 230},
                              {210, 245, 60}, {250, 190, 212}, {0, 128, 128},  {220, 190, 255},
                              {170, 110, 40}, {255, 250, 200}, {128, 0, 0},    {170, 255, 195}};
  return table[(c - 1) % 16];
}

std::string fmt(double v) {
  char b[32];
  if (v != 0 && (std::fabs(v) < 0.01 || std::fabs(v) >= 10000)) {
    std::snprintf(b, sizeof b, "%.1e", v);
  } else {
    std::snprintf(b, sizeof b, "%.3g", v);
  }
  return b;
}

}  // namespace

Canvas::Canvas(int width, int height, Rgb bg) : w_(width), h_(height), px_(3 * width * height) {
  for (int i = 0; i < w_ * h_; ++i) {
    px_[3 * i] = bg.r;
    px_[3 * i + 1] = bg.g;
    px_[3 * i + 2] = bg.b;
  }
}

void Canvas::set(int x, int y, Rgb c) {
  if (x < 0 || y < 0 || x >= w_ || y >= h_) return;
  uint8_t* p = &px_[3 * (static_cast<size_t>(y) * w_ + x)];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

Rgb Canvas::get(int x, int y) const {
  const uint8_t* p = &px_[3 * (static_cast<size_t>(y) * w_ + x)];
  return {p[0], p[1], p[2]};
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb c, int thickness) {
  const double len = std::max(std::fabs(x1 - x0), std::fabs(y1 - y0));
  const int n = std::max(1, static_cast<int>(std::ceil(len)));
  const int lo = -(thickness - 1) / 2, hi = thickness / 2;
  for (int i = 0; i <= n; ++i) {
    const double t = static_cast<double>(i) / n;
    const int x = static_cast<int>(std::lround(x0 + t * (x1 - x0)));
    const int y = static_cast<int>(std::lround(y0 + t * (y1 - y0)));
    for (int dy = lo; dy <= hi; ++dy)
      for (int dx = lo; dx <= hi; ++dx) set(x + dx, y + dy, c);
  }
}

void Canvas::rect(int x0, int y0, int x1, int y1, Rgb c) {
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) set(x, y, c);
}

void Canvas::text(int x, int y, const std::string& s, Rgb c, int scale) {
  for (size_t k = 0; k < s.size(); ++k) {
    const uint8_t* g = glyph(s[k]);
    if (g == nullptr) continue;
    const int gx = x + static_cast<int>(k) * 6 * scale;
    for (int r = 0; r < 7; ++r)
      for (int col = 0; col < 5; ++col)
        if (g[r] & (0x10 >> col))
          rect(gx + col * scale, y + r * scale, gx + col * scale + scale - 1,
               y + r * scale + scale - 1, c);
  }
}

namespace {

// The built-in writer, used where libpng is missing (the GPU machine's image need not carry it):
// a valid PNG whose zlib stream holds stored (uncompressed) deflate blocks, with the CRC-32 and
// Adler-32 the format requires. Larger files than libpng's, the same pixels.
uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xFFu] ^ (crc >> 8);
  return crc;
}

void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}

void chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_be32(out, crc32_update(0xFFFFFFFFu, &out[start], out.size() - start) ^ 0xFFFFFFFFu);
}

void write_png_builtin(const std::string& path, int w, int h, const std::vector<uint8_t>& px) {
  // Scanlines with filter byte 0 (None).
  const size_t row = 3 * static_cast<size_t>(w);
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * static_cast<size_t>(h));
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), px.begin() + static_cast<std::ptrdiff_t>(row * y),
               px.begin() + static_cast<std::ptrdiff_t>(row * (y + 1)));
  }
  std::vector<uint8_t> z{0x78, 0x01};  // zlib header: deflate, 32 KiB window, no dictionary
  for (size_t pos = 0; pos < raw.size() || pos == 0;) {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    z.push_back(last ? 1 : 0);  // BFINAL, BTYPE 00 (stored)
    z.push_back(static_cast<uint8_t>(n & 0xFF));
    z.push_back(static_cast<uint8_t>(n >> 8));
    z.push_back(static_cast<uint8_t>(~n & 0xFF));
    z.push_back(static_cast<uint8_t>((~n >> 8) & 0xFF));
    z.insert(z.end(), raw.begin() + static_cast<std::ptrdiff_t>(pos),
             raw.begin() + static_cast<std::ptrdiff_t>(pos + n));
    pos += n;
    if (last) break;
  }
  uint32_t a = 1, b = 0;  // Adler-32 of the uncompressed data
  for (uint8_t c : raw) {
    a = (a + c) % 65521u;
    b = (b + a) % 65521u;
  }
  put_be32(z, (b << 16) | a);
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, static_cast<uint32_t>(w));
  put_be32(ihdr, static_cast<uint32_t>(h));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // 8-bit RGB, deflate, adaptive filters, no interlace
  std::vector<uint8_t> out{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  chunk(out, "IHDR", ihdr);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", {});
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  if (std::fclose(f) != 0 || !ok) throw std::runtime_error("cannot write " + path);
}

}  // namespace

void Canvas::write_png(const std::string& path) const {
  // VOXAUG_TRAIN_PNG=builtin selects the built-in writer (tests use it to check that path).
  const char* choice = std::getenv("VOXAUG_TRAIN_PNG");
  if (!VOXAUG_TRAIN_LIBPNG || (choice != nullptr && std::string(choice) == "builtin")) {
    write_png_builtin(path, w_, h_, px_);
    return;
  }
#if VOXAUG_TRAIN_LIBPNG
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (png == nullptr || info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    throw std::runtime_error("libpng failed writing " + path);
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, w_, h_, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  // Sub / Up filters only: compact for flat plots, and cheap to undo for a reader.
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE | PNG_FILTER_SUB | PNG_FILTER_UP);
  png_write_info(png, info);
  for (int y = 0; y < h_; ++y) {
    png_write_row(png, const_cast<png_bytep>(&px_[3 * static_cast<size_t>(y) * w_]));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  if (std::fclose(f) != 0) throw std::runtime_error("cannot write " + path);
#endif
}

void plot_training_curve(const std::string& path, const std::vector<int64_t>& steps,
                         const std::vector<double>& loss, const std::vector<int64_t>& val_steps,
                         const std::vector<double>& val_dice, const std::string& title) {
  const int W = 900, H = 500, L = 70, R = 70, T = 40, B = 50;
  const Rgb white{255, 255, 255}, black{0, 0, 0}, grid{225, 225, 225}, blue{31, 119, 180},
      red{214, 39, 40};
  Canvas cv(W, H, white);
  const int64_t smax = std::max<int64_t>(
      1, std::max(steps.empty() ? 1 : steps.back(), val_steps.empty() ? 1 : val_steps.back()));
  double lmax = 0.0;
  for (double v : loss)
    if (std::isfinite(v)) lmax = std::max(lmax, v);
  if (lmax <= 0) lmax = 1.0;
  lmax *= 1.05;
  const double pw = W - L - R, ph = H - T - B;
  auto X = [&](double s) { return L + pw * s / static_cast<double>(smax); };
  auto YL = [&](double v) { return T + ph * (1.0 - v / lmax); };
  auto YD = [&](double v) { return T + ph * (1.0 - v); };
  for (int k = 0; k <= 5; ++k) {  // grid, ticks and labels
    const double fy = T + ph * k / 5.0, fx = L + pw * k / 5.0;
    cv.line(L, fy, W - R, fy, grid);
    cv.line(fx, T, fx, H - B, grid);
    const std::string ll = fmt(lmax * (1.0 - k / 5.0)), dl = fmt(1.0 - k / 5.0);
    cv.text(L - 6 - Canvas::text_width(ll), static_cast<int>(fy) - 3, ll, blue);
    cv.text(W - R + 6, static_cast<int>(fy) - 3, dl, red);
    const std::string sl = fmt(static_cast<double>(smax) * k / 5.0);
    cv.text(static_cast<int>(fx) - Canvas::text_width(sl) / 2, H - B + 8, sl, black);
  }
  cv.line(L, T, L, H - B, black);
  cv.line(W - R, T, W - R, H - B, black);
  cv.line(L, H - B, W - R, H - B, black);
  cv.line(L, T, W - R, T, black);
  for (size_t i = 1; i < steps.size(); ++i) {
    if (std::isfinite(loss[i - 1]) && std::isfinite(loss[i]))
      cv.line(X(steps[i - 1]), YL(loss[i - 1]), X(steps[i]), YL(loss[i]), blue);
  }
  for (size_t i = 0; i < val_steps.size(); ++i) {
    if (!std::isfinite(val_dice[i])) continue;
    if (i > 0 && std::isfinite(val_dice[i - 1]))
      cv.line(X(val_steps[i - 1]), YD(val_dice[i - 1]), X(val_steps[i]), YD(val_dice[i]), red, 2);
    cv.rect(static_cast<int>(X(val_steps[i])) - 2, static_cast<int>(YD(val_dice[i])) - 2,
            static_cast<int>(X(val_steps[i])) + 2, static_cast<int>(YD(val_dice[i])) + 2, red);
  }
  cv.text(W / 2 - Canvas::text_width(title, 2) / 2, 10, title, black, 2);
  cv.text(W / 2 - Canvas::text_width("STEP") / 2, H - B + 24, "STEP", black);
  cv.text(6, T - 14, "LOSS", blue);
  cv.text(W - R + 6, T - 14, "VAL DICE", red);
  cv.write_png(path);
}

void plot_validation_slices(const std::string& path, const at::Tensor& image,
                            const at::Tensor& truth, const at::Tensor& pred,
                            const std::array<double, 3>& pixdim, const std::string& title) {
  TORCH_CHECK(image.dim() == 3 && truth.sizes() == image.sizes() && pred.sizes() == image.sizes(),
              "plot_validation_slices: (X, Y, Z) image, truth and prediction expected");
  const at::Tensor img = image.to(at::kFloat).contiguous();
  const at::Tensor tru = truth.to(at::kByte).contiguous();
  const at::Tensor prd = pred.to(at::kByte).contiguous();
  const int64_t n[3] = {img.size(0), img.size(1), img.size(2)};
  const int panel = 220;  // longest panel side in pixels
  // Panels: axial (x right, y up), coronal (x right, z up), sagittal (y right, z up).
  const int axes[3][3] = {{0, 1, 2}, {0, 2, 1}, {1, 2, 0}};  // horizontal, vertical, fixed
  const char* names[3] = {"AXIAL", "CORONAL", "SAGITTAL"};
  int pw[3], ph[3];
  for (int p = 0; p < 3; ++p) {
    const double wmm = n[axes[p][0]] * pixdim[axes[p][0]], hmm = n[axes[p][1]] * pixdim[axes[p][1]];
    const double s = panel / std::max(wmm, hmm);
    pw[p] = std::max(1, static_cast<int>(std::lround(wmm * s)));
    ph[p] = std::max(1, static_cast<int>(std::lround(hmm * s)));
  }
  const int gap = 10, top = 34, rowlab = 16;
  const int W = gap + (panel + gap) * 3, H = top + 2 * (rowlab + panel + gap);
  Canvas cv(W, H, {0, 0, 0});
  const float* ip = img.data_ptr<float>();
  const uint8_t* tp = tru.data_ptr<uint8_t>();
  const uint8_t* pp = prd.data_ptr<uint8_t>();
  auto at3 = [&](int64_t x, int64_t y, int64_t z) { return (x * n[1] + y) * n[2] + z; };
  for (int row = 0; row < 2; ++row) {
    const uint8_t* lab = row == 0 ? tp : pp;
    const int y0 = top + row * (rowlab + panel + gap);
    cv.text(gap, y0, row == 0 ? "TRUE LABELS" : "PREDICTED LABELS", {255, 255, 255});
    for (int p = 0; p < 3; ++p) {
      const int x0 = gap + p * (panel + gap);
      const int ha = axes[p][0], va = axes[p][1], fa = axes[p][2];
      cv.text(x0 + 110, y0, names[p], {200, 200, 200});
      for (int py = 0; py < ph[p]; ++py) {
        for (int px = 0; px < pw[p]; ++px) {
          int64_t idx[3];
          idx[ha] = std::min<int64_t>(n[ha] - 1, px * n[ha] / pw[p]);
          idx[va] = std::min<int64_t>(n[va] - 1, (ph[p] - 1 - py) * n[va] / ph[p]);  // up
          idx[fa] = n[fa] / 2;
          const int64_t o = at3(idx[0], idx[1], idx[2]);
          const float v = std::clamp(ip[o], 0.0f, 1.0f);
          const auto g = static_cast<uint8_t>(std::lround(v * 255.0f));
          Rgb c{g, g, g};
          if (lab[o] > 0) {
            const Rgb k = class_color(lab[o]);
            c = {static_cast<uint8_t>((g + k.r) / 2), static_cast<uint8_t>((g + k.g) / 2),
                 static_cast<uint8_t>((g + k.b) / 2)};
          }
          cv.set(x0 + px, y0 + rowlab + py, c);
        }
      }
    }
  }
  cv.text(gap, 8, title, {255, 255, 255}, 2);
  cv.write_png(path);
}

}  // namespace voxaug::train
