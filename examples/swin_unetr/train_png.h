// A tiny RGB rasteriser (lines, rectangles, a 5x7 bitmap font) and the two figures of the Swin
// UNETR training example, written as PNG (libpng when found, else a built-in stored-deflate
// writer).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace voxaug::train {

struct Rgb {
  uint8_t r, g, b;
};

class Canvas {
 public:
  Canvas(int width, int height, Rgb background);
  int width() const { return w_; }
  int height() const { return h_; }
  void set(int x, int y, Rgb c);
  Rgb get(int x, int y) const;
  void line(double x0, double y0, double x1, double y1, Rgb c, int thickness = 1);
  void rect(int x0, int y0, int x1, int y1, Rgb c);  // filled, inclusive
  // 5x7 font (digits, A-Z (lower case drawn as upper case), space and . , : - = / ( ) + _ %),
  // glyph cell 6x8 times `scale`; (x, y) is the top-left corner.
  void text(int x, int y, const std::string& s, Rgb c, int scale = 1);
  static int text_width(const std::string& s, int scale = 1) {
    return static_cast<int>(s.size()) * 6 * scale;
  }
  // Throws std::runtime_error naming the path on failure.
  void write_png(const std::string& path) const;

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
};

// Loss (left axis) and validation Dice (right axis, [0, 1]) against the step.
void plot_training_curve(const std::string& path, const std::vector<int64_t>& steps,
                         const std::vector<double>& loss, const std::vector<int64_t>& val_steps,
                         const std::vector<double>& val_dice, const std::string& title);

// Axial / coronal / sagittal mid-slices of one volume ((X, Y, Z) RAS axes, CPU): the image in gray
// with the true labels (top row) and the predicted labels (bottom row) overlaid. image float
// (displayed over [0, 1]), labels uint8. pixdim sets the pixel aspect ratio.
void plot_validation_slices(const std::string& path, const at::Tensor& image,
                            const at::Tensor& truth, const at::Tensor& pred,
                            const std::array<double, 3>& pixdim, const std::string& title);

}  // namespace voxaug::train
